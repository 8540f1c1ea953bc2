"""SL105's finding about a batch that leaves a mesh axis idle: the step's batch arguments (those that are not
state, as suggest's baselines read them) split on dimension 0 over some mesh axes and on no other, and another
axis of several devices splits none of them, nor any other argument. XLA's partitioner then has that axis's
devices holding the same rows and spends the axis on resharding the step's values between ops: a newcomer's
jraph GraphNet, params replicated and the graph batch on P('data') of a data=4 x model=2 mesh, makes 189
resharding collectives over 'model' around its ``nodes[senders]`` gathers and concatenations, each under
`unexplained-reshard-bytes` (a summary line and two SL105s with no argument; issue 46, newbie15 F2). The cause
is the batch's layout, said at the line where the step first reads the first batch argument, naming the batch
arguments and their PartitionSpec; the fix is suggest's data-parallel layout (passes/common/data_parallel.py:
dimension 0 over every axis), which the analyzer compiles (analyzer/backend/idle_batch_fixes.py) and prints only
measured better. An axis that splits a weight is not idle (tensor parallelism beside a batch on the other axis:
its reshards are the weights' layout's, SL105's other findings).

The collectives it explains are the resharding ones over an idle axis that no earlier rule claims
(``RuleTraits.claims``, in code order) and that move or serve no state argument (a weight's layout is that
weight's SL105 finding): SL105 claims them for this finding, so they are neither its other findings' nor its
note's."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.byte_sizes import format_bytes
from ..common.data_parallel import data_parallel_layout
from ..common.sharding_text import pspec_text
from ..common.word_lists import listed
from ..models.report import Collective, TensorInfo
from ..models.rule_codes import SL105
from .context import RuleContext
from .parameter_advice import idle_axes, parameter_of

# The first line of the finding's provenance: what the analyzer's fix stage recognizes it by.
IDLE_BATCH_WHY = "the batch arguments leave mesh axes idle"


@dataclass(frozen=True)
class IdleBatch:
    idle: tuple[str, ...]  # the mesh axes (several devices) that split no batch argument
    batch: tuple[TensorInfo, ...]  # the batch arguments split on dimension 0, in argument order
    collectives: tuple[Collective, ...]  # the resharding collectives over an idle axis it explains


def _bare(label: str) -> str:
    return label.split(":")[0]


def idle_batch(ctx: RuleContext, limit: int, claimed: frozenset[str]) -> IdleBatch | None:
    """The idle axes, the batch arguments to move onto them and the resharding collectives over them no rule
    in ``claimed`` explains, where they reach ``limit`` per step together; None where the batch is not split
    on dimension 0 alone, no axis is idle, or a batch argument's dimension 0 does not take every axis."""
    state = {rt.input.index for rt in ctx.roundtrips}
    batch = [t for t in ctx.inputs if t.index not in state and t.shape]
    split = [t for t in batch if any(t.sharding or [])]
    if not split or any(any(dim for dim in (t.sharding or [])[1:]) for t in split):
        return None
    # Idle: an axis that splits no argument at all. One that splits a weight (tensor parallelism beside a batch
    # on the other axis, the main example's) is the weights' axis: its reshards are theirs to explain.
    idle = tuple(idle_axes(ctx))
    mesh = ctx.signature.mesh.axes
    free = [a for a, n in mesh if n > 1]
    if not idle or any(data_parallel_layout(t.shape, free, dict(mesh)) is None for t in split):
        return None
    # A collective whose operand is a weight, or that serves one's matmul (parameter_of), is that weight's
    # layout's to explain (SL105's finding naming it), not the batch's.
    over = tuple(c for c in ctx.collectives if c.intent == "reshard" and c.hlo_name not in claimed
                 and any(_bare(a) in idle for a in c.mesh_axes)
                 and ((named := parameter_of(ctx, c)[0]) is None or named.index not in state))
    if sum(c.bytes * c.count for c in over) < limit:
        return None
    return IdleBatch(idle, tuple(split), over)


def idle_batch_claims(ctx: RuleContext, limit: int) -> list[str]:
    """SL105's claims: the collectives its idle-batch finding explains, given the earlier rules' claims."""
    found = idle_batch(ctx, limit, ctx.claimed_collectives)
    return [c.hlo_name for c in found.collectives] if found is not None else []


def idle_batch_finding(ctx: RuleContext, limit: int) -> tuple[str, str, IdleBatch, list[list[str]]] | None:
    """(message, fix, what it found, the batch's new layout of dimension 0), or None: the collectives are
    SL105's own claims (the other rules' are not this finding's)."""
    others = frozenset(n for code, names in ctx.claims_by_rule.items() if code != SL105.code for n in names)
    found = idle_batch(ctx, limit, others)
    if found is None:
        return None
    free = [a for a, n in ctx.signature.mesh.axes if n > 1]
    layout = data_parallel_layout(found.batch[0].shape, free, dict(ctx.signature.mesh.axes)) or []
    layouts = batch_layouts_text(found.batch)
    idle = ", ".join(f"'{a}'" for a in found.idle)
    axes = "axis" if len(found.idle) == 1 else "axes"
    total = sum(c.bytes * c.count for c in found.collectives)
    count = sum(c.count for c in found.collectives)
    kinds = listed(sorted({c.kind for c in found.collectives}))
    on = batch_axes_text(found.batch)
    message = (f"{count} resharding collectives ({kinds}) over mesh {axes} {idle} move {format_bytes(total)} per step "
               "per device in all, which no stated sharding asked for: the batch arguments "
               f"{layouts} are split on dimension 0 over {on} "
               f"only and leave mesh {axes} {idle} idle (no argument is split on it, so its devices hold the same "
               "rows), and XLA's partitioner spends it on resharding the step's values between ops instead")
    return message, batch_fix_text(found.batch, [layout] * len(found.batch)), found, layout


def _same_layout(batch: tuple[TensorInfo, ...] | list[TensorInfo]) -> bool:
    written = pspec_text(batch[0].sharding or [])
    return all(pspec_text(t.sharding or []) == written for t in batch)


def batch_layouts_text(batch: tuple[TensorInfo, ...] | list[TensorInfo]) -> str:
    """The batch arguments and their layouts: 'x and y P('data')' where they share one, else each its own."""
    if _same_layout(batch):
        return f"{listed([t.path for t in batch])} {pspec_text(batch[0].sharding or [])}"
    return listed([f"{t.path} {pspec_text(t.sharding or [])}" for t in batch])


def batch_axes_text(batch: tuple[TensorInfo, ...] | list[TensorInfo]) -> str:
    """The mesh axes the batch arguments' dimension 0 is split over."""
    return ", ".join(sorted({_bare(a) for t in batch for a in (t.sharding or [[]])[0]}))


def batch_fix_text(batch: tuple[TensorInfo, ...] | list[TensorInfo], layouts: list[list[list[str]]]) -> str:
    """The fix of a batch that leaves mesh axes idle (SL105's and SL207's), one layout per batch argument:
    suggest's data-parallel layout (dimension 0 over every mesh axis), or a vmapped batch's dimension there."""
    written = pspec_text(batch[0].sharding or []) if _same_layout(batch) else "their written layouts"
    specs = [pspec_text(layout) for layout in layouts]  # X f32[n, f] and y f32[n] share P(('data', 'model'))
    same = len(set(specs)) == 1
    if same and not any(dim for layout in layouts for dim in layout[1:]):
        return (f"shard the batch arguments on dimension 0 over every mesh axis, as suggest's data-parallel baseline "
                f"does: {listed([t.path for t in batch])} as {specs[0]} instead of {written}")
    moves = (f"{listed([t.path for t in batch])} as {specs[0]}" if same
             else listed([f"{t.path} as {spec}" for t, spec in zip(batch, specs, strict=True)]))
    return f"shard the batch arguments on their batch dimension over every mesh axis: {moves} instead of {written}"
