"""The parameter a collective finding is about, and the concrete sharding to give it.

Rules ask ``parameter_of`` for the argument behind a collective (the compiled
program's operand identity, ``hlo/collective_parameter.py``) and ``moved_off``
for its sharding with the axes taken off the dimensions an op reads along or a
matmul contracts, and put on the largest other dimension they divide. The
analyzer compiles the program with that sharding before the fix is shown
(``FixCheck``): a spec worked out here is a candidate, not advice yet.
"""

from __future__ import annotations

from ..common.device_groups import MeshInfo
from ..hlo.collective_intent import squeezed
from ..hlo.collective_parameter import CollectiveParameter, ParameterRole, axis_size
from ..models.report import Collective, TensorInfo
from ..stablehlo.sharding_constraints import axes_off
from .context import RuleContext


def parameter_of(ctx: RuleContext, c: Collective) -> tuple[TensorInfo | None, CollectiveParameter | None]:
    found = ctx.collective_parameters.get(c.hlo_name)
    if found is None:
        return None, None
    return next((t for t in ctx.inputs if t.index == found.index), None), found


def moved_off(t: TensorInfo, dims: set[int], sizes: dict[str, int]) -> list[list[str]] | None:
    """``t``'s sharding with the axes of ``dims`` moved to the largest other unsharded dimension they
    divide; None when there is no such dimension (or nothing to move)."""
    sharding = [list(a) for a in (t.sharding or [])] + [[] for _ in range(len(t.shape) - len(t.sharding or []))]
    moving = [a for d in sorted(dims) if d < len(sharding) for a in sharding[d]]
    if not moving:
        return None
    parts = 1
    for a in moving:
        parts *= axis_size(a, sizes)
    targets = [d for d in range(len(t.shape)) if d not in dims and not sharding[d] and t.shape[d] % parts == 0]
    if not targets:
        return None
    target = max(targets, key=lambda d: (t.shape[d], -d))
    for d in dims:
        if d < len(sharding):
            sharding[d] = []
    sharding[target] = moving
    return sharding


def off_dims_specs(t: TensorInfo, dims: set[int], sizes: dict[str, int]) -> list[list[list[str]]]:
    """The layouts that keep ``t``'s axes off ``dims``, nearest the written one first: moved to an unsharded
    dimension (``moved_off``), else beside the axes of the largest other dimension they divide, then dropped
    (replicated over them). A blackjax step's data X on P('data', 'chains'), its features gathered over
    'chains' with its rows on 'data', had no layout to try (newbie17 F3): P(('data', 'chains')) and P('data')."""
    sharding = [list(a) for a in (t.sharding or [])] + [[] for _ in range(len(t.shape) - len(t.sharding or []))]
    moving = [a for d in sorted(dims) if d < len(sharding) for a in sharding[d]]
    if not moving:
        return []
    found = [m] if (m := moved_off(t, dims, sizes)) is not None else []
    base = [[] if d in dims else list(a) for d, a in enumerate(sharding)]
    parts = 1
    for a in moving:
        parts *= axis_size(a, sizes)
    for d in sorted(range(len(t.shape)), key=lambda d: (-t.shape[d], d)):
        held = 1
        for a in base[d]:
            held *= axis_size(a, sizes)
        if d not in dims and base[d] and t.shape[d] % (held * parts) == 0:
            found.append([list(a) + (moving if k == d else []) for k, a in enumerate(base)])
            break
    found.append(base)
    return [s for k, s in enumerate(found) if s not in found[:k]]


def contracted_axes_moves(t: TensorInfo, dims: set[int], summed: list[str], mesh: MeshInfo) -> list[list[list[str]]]:
    """Where ``moved_off`` finds no unsharded dimension (a weight on two mesh axes, FSDP with tensor
    parallelism: P('data', 'model')), the specs that keep the axes a partial sum adds over (``summed``, on the
    contracted ``dims``) off the dimension the matmul contracts: all of them, then each alone, moved onto the
    last other dimension they divide beside the axes already there, then dropped. Candidates for the fix check
    to compile, nearest the written layout first."""
    sharding = [list(a) for a in (t.sharding or [])] + [[] for _ in range(len(t.shape) - len(t.sharding or []))]
    names = {a.split(":")[0] for a in summed}
    on = [a.split(":")[0] for d in sorted(dims) if d < len(sharding) for a in sharding[d]
          if a.split(":")[0] in names] or [a.split(":")[0] for d in sorted(dims) if d < len(sharding)
                                           for a in sharding[d]]
    groups = [set(on)] + ([{a} for a in on] if len(on) > 1 else [])
    moved: list[list[list[str]]] = []
    dropped: list[list[list[str]]] = []
    for group in groups:
        specs = axes_off(tuple(t.shape), sharding, group, mesh)
        for spec in specs[:-1]:
            if spec not in moved:
                moved.append(spec)
        if specs and specs[-1] not in dropped:
            dropped.append(specs[-1])
    return [s for s in moved + dropped if s != sharding]


def moved_onto(t: TensorInfo, dims: set[int], axes: list[str], sizes: dict[str, int]) -> list[list[str]] | None:
    """``t``'s sharding with the mesh ``axes`` taken off wherever they are and put on the first of
    ``dims`` they divide: a weight that shards the dimension a matmul contracts, as its gathered
    input is sharded, multiplies the shards in place and sums the partial products."""
    names = {a.split(":")[0] for a in axes}
    sharding = [[a for a in d if a.split(":")[0] not in names] for d in (t.sharding or [])]
    sharding += [[] for _ in range(len(t.shape) - len(sharding))]
    parts = 1
    for a in axes:
        parts *= axis_size(a, sizes)
    target = next((d for d in sorted(dims) if d < len(t.shape) and not sharding[d] and t.shape[d] % parts == 0),
                  None)
    if target is None or not axes:
        return None
    sharding[target] = list(axes)
    return None if sharding == [list(a) for a in (t.sharding or [])] else sharding


def batch_moves(t: TensorInfo, c: Collective, batch: tuple[int, ...], sizes: dict[str, int]) -> list[list[list[str]]]:
    """For an all-to-all of ``t``: its gathered axes moved onto each of the dimensions a matmul batches over
    (``batch``, RuleContext.argument_batch_dims) that is unsharded and that they divide, first to last."""
    dims = gathered_dims(t, c)
    sharding = [list(a) for a in (t.sharding or [])] + [[] for _ in range(len(t.shape) - len(t.sharding or []))]
    moving = [a for d in sorted(dims) for a in sharding[d]]
    parts = 1
    for a in moving:
        parts *= axis_size(a, sizes)
    out: list[list[list[str]]] = []
    for b in batch if c.kind == "all-to-all" and moving else ():
        if b in dims or b >= len(t.shape) or sharding[b] or t.shape[b] % parts:
            continue
        moved = [[] if d in dims else list(a) for d, a in enumerate(sharding)]
        moved[b] = moving
        out.append(moved)
    return out


def contracted_dims(t: TensorInfo, found: CollectiveParameter | None) -> set[int]:
    """The weight's dimensions the matmul contracts: read in the compiled matmul where the weight
    reaches it whole, else (a 2-D weight) its sharded dimensions, which a partial sum contracted.
    ``found`` None: a partial sum's weight the compiled program named only by size (SL103's own trace)."""
    if found is not None and found.contracting is not None:
        return set(found.contracting)
    if len(t.shape) == 2 and (found is None or found.role is ParameterRole.partial_sums):
        return {d for d, axes in enumerate(t.sharding or []) if axes}
    return set()


def gathered_dims(t: TensorInfo, c: Collective) -> set[int]:
    """The input's dimensions sharded on the axes the collective gathers."""
    names = {a.split(":")[0] for a in c.mesh_axes}
    return {d for d, axes in enumerate(t.sharding or []) if any(a.split(":")[0] in names for a in axes)}


Advice = tuple[TensorInfo | None, CollectiveParameter | None, list[list[str]] | None]


def sharding_advice(ctx: RuleContext, c: Collective) -> Advice:
    """The parameter behind a resharding collective, how it serves it, and the sharding to try for it:
    an input kept off the dimension its op reads along, a weight that multiplies the shards in place."""
    parameter, served = parameter_of(ctx, c)
    if parameter is None or served is None or not parameter.sharding or not any(parameter.sharding):
        return parameter, served, None
    sizes = dict(ctx.signature.mesh.axes)
    if served.role is ParameterRole.operand:  # keep the input off the dimension the op reads along
        # An all-to-all moving a weight a matmul batches over (an MoE's expert weights, read by EnD,EDH->EnH):
        # the axis where the matmul reads it, on the batch dimension; else the largest other dimension.
        batched = batch_moves(parameter, c, ctx.argument_batch_dims.get(parameter.index, ()), sizes)
        off = off_dims_specs(parameter, gathered_dims(parameter, c), sizes)
        return parameter, served, batched[0] if batched else (off[0] if off else None)
    if served.role is ParameterRole.read:
        return parameter, served, moved_off(parameter, set(served.contracting or ()), sizes)
    if served.role is ParameterRole.output:  # the weight's output features whole: the matmul's output is not split
        return parameter, served, moved_off(parameter, gathered_dims(parameter, c), sizes)
    if served.role is ParameterRole.feeds and c.kind == "all-gather":  # multiply the shards in place
        return parameter, served, moved_onto(parameter, contracted_dims(parameter, served), c.mesh_axes, sizes)
    return parameter, served, moved_off(parameter, contracted_dims(parameter, served), sizes)


def idle_axes(ctx: RuleContext) -> list[str]:
    """The mesh axes (of more than one device) that shard no argument: the devices along one hold the same
    values and repeat the same work."""
    used = {a.split(":")[0] for t in ctx.inputs for dim in (t.sharding or []) for a in dim}
    return [name for name, size in ctx.signature.mesh.axes if size > 1 and name not in used]


def spare_axes(ctx: RuleContext, parameter: TensorInfo, c: Collective) -> list[str]:
    """The mesh axes a weight gathered whole for its matmul could be sharded on instead: the idle ones
    (they shard no argument); where none is idle and the gathered axes shard the batch too (an argument
    that is not state: the matmul then splits the batch's rows on them and needs the weight whole), the
    axes of more than one device that neither the gather nor the weight uses."""
    idle = idle_axes(ctx)
    if idle:
        return idle
    gathered = {a.split(":")[0] for a in c.mesh_axes}
    state = {rt.input.index for rt in ctx.roundtrips}
    batch = {a.split(":")[0] for t in ctx.inputs if t.index not in state and t.index != parameter.index
             for dim in (t.sharding or []) for a in dim}
    if not gathered or not gathered <= batch:
        return []
    own = {a.split(":")[0] for dim in (parameter.sharding or []) for a in dim}
    return [name for name, size in ctx.signature.mesh.axes if size > 1 and name not in gathered | own]


def idle_axis_advice(ctx: RuleContext, c: Collective) -> Advice:
    """An all-gather that rebuilds a whole parameter on every device (FSDP-style, intended by its
    sharding) for a matmul, where another mesh axis could hold it (``spare_axes``): the parameter, and
    the sharding that puts it on those axes instead of the gathered ones, on the largest dimension its
    matmul does not contract that they divide (the matmul then multiplies it in place, as tensor
    parallelism does, and nothing gathers it). The sharding is None where the matmul's contracted
    dimensions are unknown or no dimension is left."""
    parameter, served = parameter_of(ctx, c)
    if (c.kind != "all-gather" or parameter is None or served is None or served.role is not ParameterRole.operand
            or served.contracting is None or not any(parameter.sharding or [])
            or squeezed(tuple(c.shape)) != squeezed(tuple(parameter.shape))):
        return parameter, served, None
    idle, sizes = spare_axes(ctx, parameter, c), dict(ctx.signature.mesh.axes)
    # All the spare axes on one dimension where they divide it, else the largest one alone.
    for axes in [idle] + [[a] for a in sorted(idle, key=lambda a: -sizes[a])][:1 if len(idle) > 1 else 0]:
        parts = 1
        for a in axes:
            parts *= axis_size(a, sizes)
        kept = [d for d in range(len(parameter.shape)) if d not in served.contracting
                and parameter.shape[d] % parts == 0 and parameter.shape[d] >= parts]
        if axes and kept:
            target = max(kept, key=lambda d: (parameter.shape[d], -d))
            return parameter, served, [list(axes) if d == target else [] for d in range(len(parameter.shape))]
    return parameter, served, None
