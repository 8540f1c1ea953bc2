"""Why a collective runs: the traffic a sharding asked for, or resharding nobody asked for.

- ``parameter-gather``: an all-gather whose result is an argument's shard with
  the gathered axes undone (or one layer of a stacked argument: the first axis,
  or inside a loop any unsharded one): FSDP/ZeRO gathering a parameter before it is used; or a
  collective-permute passing a parameter's shard to a matmul (one step of a
  TPU collective matmul).
- ``gradient-reduction``: a reduce-scatter or all-reduce whose result has an
  argument's per-device shape (or one layer's): a gradient summed back to its
  parameter's sharding; or, reducing a matmul's result, the argument's shard in
  any order of its dimensions, or with some of its own axes undone (the gradient
  of a weight the step read gathered or transposed, summed over the batch), or
  cut further by axes the reduction does not run over (the layout XLA returns the
  weight in: a replicated embedding's gradient made tp's half); or,
  in the backward pass, a collective-permute passing such a partial sum on to
  be added to (the reduce-scatter half of a TPU collective matmul).
- ``activation``: the sum of partial results that a matmul or a reduction
  over a sharded dimension leaves on each device (tensor parallelism, a norm
  over a sharded hidden dimension).
- ``reshard``: anything else; no stated sharding asked for it (a gather along
  an axis an op reads, a layout change between ops).

Intended traffic (the first three) is reported, counted and priced, but the rules warn on
resharding only. Shapes are compared without the dtype (TPUs gather f32 parameters as bf16).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from math import prod

from ..common.device_groups import MeshInfo
from ..common.shapes import shape_bytes
from ..models.report import Collective, TensorInfo
from .collective_site import asked_by_program
from .concatenated_sums import summed_values
from .module import HloInstruction, HloModule
from .pass_direction import is_lookup_gradient, pass_op_name
from .value_origin import entry_parameter, origin_index

INTENDED = frozenset({"parameter-gather", "gradient-reduction", "activation", "explicit", "constraint",
                      "error-path"})
# Partial results that a sharded contraction or reduction leaves on each device.
_MATMUL = frozenset({"dot", "convolution", "reduce"})
_MATMUL_CALL = re.compile(r"gemm|matmul|dot|conv", re.I)
_AXIS = re.compile(r"^([^:]+)")


def _axis_name(label: str) -> str:
    """``data`` for ``data`` and for the sub-axis ``data:(2)2``."""
    return _AXIS.match(label).group(1)


def _axis_names(labels: list[str]) -> frozenset[str]:
    if not labels or labels[0].startswith("<"):  # <N devices>: no axis of the mesh
        return frozenset()
    return frozenset(map(_axis_name, labels))


def _local(t: TensorInfo, sizes: dict[str, int], undone: frozenset[str]) -> tuple[int, ...]:
    dims = list(t.sharding or []) + [[]] * (len(t.shape) - len(t.sharding or []))
    return tuple(-(-n // prod(sizes.get(name, 1) for name in map(_axis_name, axes) if name not in undone))
                 for n, axes in zip(t.shape, dims))


def _shapes(t: TensorInfo, sizes: dict[str, int], undone: frozenset[str]) -> set[tuple[int, ...]]:
    """The argument's shard with ``undone`` axes gathered, and one layer of it, without unit dimensions.
    A stack of three or more dimensions may hold its layers on any unsharded axis (MaxText stores them
    second, ``(embed, layers, mlp)``), and XLA keeps or drops the sliced layer's unit dimension as it
    likes."""
    full = _local(t, sizes, undone)
    if len(full) <= 1:
        return {squeezed(full)}
    # A stack's layer axis is not sharded (a scan slices it on every device alike). A layer taken off
    # another axis than the first is marked: it counts only inside a loop (the scan over the layers), where
    # an activation's slice of the same shape would not be mistaken for it.
    sharded = [bool(d) for d in (t.sharding or [])] + [False] * len(full)
    others = [i for i in range(1, len(full)) if not sharded[i]] if len(full) >= 3 else []
    return {squeezed(full), squeezed(full[1:])} | {LOOP_ONLY + squeezed(full[:i] + full[i + 1:]) for i in others}


# Marks a shape that is a parameter's only as one layer sliced inside a loop (a tuple prefix no shape has).
LOOP_ONLY = (-1,)


def _holds(shapes: set[tuple[int, ...]], result: tuple[int, ...], in_loop: bool) -> bool:
    return result in shapes or (in_loop and LOOP_ONLY + result in shapes)


def squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape without its unit dimensions: how parameter shapes and collective results are compared."""
    return tuple(n for n in shape if n != 1)


def _is_matmul_op(ins: HloInstruction) -> bool:
    return ins.opcode in _MATMUL or (ins.opcode == "custom-call"
                                     and bool(_MATMUL_CALL.search(ins.attrs.get("custom_call_target", ""))))


def _matmul_of(ins: HloInstruction | None, module: HloModule, depth: int = 0) -> HloInstruction | None:
    """The matmul (or reduction) that produces ``ins``: itself, the one inside its
    fusion, or the one behind layout ops."""
    if ins is None or depth > 3:
        return None
    if _is_matmul_op(ins):
        return ins
    if ins.opcode == "fusion":
        for _, name in ins.called():
            comp = module.computations.get(name)
            found = next((i for i in comp.instructions if _is_matmul_op(i)), None) if comp else None
            if found is not None:
                return found
        # A fusion that only converts or re-lays out the matmul's result (CPU rounds an f32 dot's result
        # through bf16 in one, and reshapes it back to the activation's shape) before it is summed.
        if len(ins.operands) == 1 and _fusion_is_layout(ins, module):
            return _matmul_of(module.instruction(ins.operands[0]), module, depth + 1)
        return None
    if ins.opcode in ("bitcast", "copy", "reshape", "transpose", "convert", "get-tuple-element") and ins.operands:
        return _matmul_of(module.instruction(ins.operands[0]), module, depth + 1)
    return None


def _is_matmul(ins: HloInstruction | None, module: HloModule, depth: int = 0) -> bool:
    return _matmul_of(ins, module, depth) is not None


# Ops that keep a value's data (TPU's copy-start/copy-done move it between memories, HBM and VMEM).
_PASS_THROUGH = ("bitcast", "copy", "copy-start", "copy-done", "reshape", "transpose", "convert", "get-tuple-element",
                 "all-gather-done", "collective-permute-done", "dynamic-slice", "slice", "broadcast")


def _fusion_is_layout(ins: HloInstruction, module: HloModule) -> bool:
    comps = [module.computations.get(name) for _, name in ins.called()]
    return bool(comps) and all(
        c is not None and all(i.opcode in _PASS_THROUGH + ("parameter", "tuple") for i in c.instructions)
        for c in comps)


def _pieces(c: Collective, ins: HloInstruction, module: HloModule) -> list[HloInstruction]:
    """Where a collective's result appears: the instruction, the other pieces of a split collective, and
    the fusions that wrap them (a TPU async collective fusion's done step returns the gathered array)."""
    found = [ins] + [p for p in map(module.instruction, c.pieces) if p is not None]
    callers = module.callers()
    wrappers = [f for p in found for f in callers.get(module.computation_of(p.name) or "", []) if f.opcode == "fusion"]
    return found + wrappers


def _body_parameters(body: str, module: HloModule) -> list[HloInstruction]:
    found: dict[str, list[HloInstruction]] = module.derived.setdefault("loop_body_parameters", {})
    if body not in found:  # once per body, however many collectives go round it
        comp = module.computations.get(body)
        found[body] = [i for i in comp.instructions if i.opcode == "parameter"] if comp else []
    return found[body]


def _into_loop(value: HloInstruction, module: HloModule,
               users: dict[str, list[HloInstruction]]) -> list[HloInstruction]:
    """Where a tuple goes into a loop: the body's parameter, when ``value`` is the tuple a while loop starts
    from or its body's carried tuple (the next iteration). A TPU collective matmul's ring passes its shard
    on this way. The printed operand ``%param#k`` reads as the parameter, so the element is not told
    apart from its siblings."""
    if value.opcode != "tuple":
        return []
    bodies = [name for w in users.get(value.name, []) if w.opcode == "while"
              for role, name in w.called() if role == "body"]
    if value.is_root:
        body = module.computation_of(value.name) or ""
        if any(w.opcode == "while" and ("body", body) in w.called() for w in module.callers().get(body, [])):
            bodies.append(body)
    return [p for body in bodies for p in _body_parameters(body, module)]


def _reaches(starts: list[HloInstruction], module: HloModule, users: dict[str, list[HloInstruction]],
             found: Callable[[HloInstruction], bool], *, limit: int, round_loops: bool) -> bool:
    """Whether a value reaches an instruction ``found`` accepts through ops that keep its data (and, with
    ``round_loops``, layout fusions and a loop's start or carried tuple), looking at ``limit`` values."""
    todo, seen = list(starts), set[str]()
    while todo and len(seen) < limit:
        cur = todo.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        for user in users.get(cur.name, []):
            if found(user):
                return True
            if user.opcode in _PASS_THROUGH or (round_loops and user.opcode == "fusion"
                                                and _fusion_is_layout(user, module)):
                todo.append(user)
            if round_loops:
                todo.extend(_into_loop(user, module, users))
    return False


def _feeds_matmul(starts: list[HloInstruction], module: HloModule, users: dict[str, list[HloInstruction]]) -> bool:
    """Whether a value reaches a matmul through layout-only ops (and round a loop): a parameter
    gathered to be multiplied (FSDP), not to be read along (a gather, a scan)."""
    return _reaches(starts, module, users, lambda user: _is_matmul(user, module, depth=3), limit=64,
                    round_loops=True)


def _is_summed(starts: list[HloInstruction], module: HloModule, users: dict[str, list[HloInstruction]]) -> bool:
    """Whether a value is added to, through layout-only ops: an add, or a fusion that adds and multiplies
    nothing (a reduce-scatter's step: the partial sum that arrived plus this device's part)."""
    return _reaches(starts, module, users,
                    lambda user: user.opcode == "add" or (user.opcode == "fusion" and _adds_only(user, module)),
                    limit=16, round_loops=False)


def _adds_only(fusion: HloInstruction, module: HloModule) -> bool:
    comps = [module.computations.get(name) for _, name in fusion.called()]
    ops = {i.opcode for c in comps if c is not None for i in c.instructions}
    return "add" in ops and not ops & (_MATMUL | {"fusion"})


def _subsets(axes: frozenset[str]) -> list[tuple[str, ...]]:
    names = sorted(axes)
    return [tuple(n for k, n in enumerate(names) if mask >> k & 1) for mask in range(1 << len(names))]


class _ParameterShapes:
    """The shapes a parameter's collectives can have, worked out once per
    (parameter, gathered axes), and their union once per set of collective axes:
    intent is asked of every collective, and a large step has thousands of
    collectives and of parameters."""

    def __init__(self, params: tuple[TensorInfo, ...], mesh: MeshInfo):
        self.sizes = dict(mesh.axes)
        self.sharded = [t for t in params if t.sharding and any(t.sharding) and len(t.shape) >= 1]
        self.held = {t.index: frozenset(_axis_name(a) for dim in (t.sharding or []) for a in dim) for t in params}
        self._cache: dict[tuple[int, frozenset[str]], set[tuple[int, ...]]] = {}
        self._reachable: dict[frozenset[str], set[tuple[int, ...]]] = {}
        self._more: dict[frozenset[str], set[tuple[int, ...]]] = {}
        self.params = [t for t in params if len(t.shape) >= 1]
        # Any parameter's shard (or one layer of it), for the common "no" answer.
        self.any_shard = set().union(*(self.shapes(t, frozenset()) for t in params if len(t.shape) >= 1)) \
            if params else set()
        # The same as element counts, with LOOP_ONLY's mark: a collective matmul's ring passes the shard in
        # whatever layout its matmul reads (wq's (256, 2048) layer as (16, 128, 1, 256)).
        # A parameter's shard, or with any of its own axes undone (its gradient before the slice to them),
        # in any order of its dimensions (the gradient's matmul may produce it transposed).
        self.less_sharded = {tuple(sorted(s)) for t in self.sharded for sub in _subsets(self.held[t.index])
                             for s in self.shapes(t, frozenset(sub)) if s[:1] != LOOP_ONLY}
        self.any_shard_size = {s[:1] + (prod(s[1:]),) if s[:1] == LOOP_ONLY else (prod(s),) for s in self.any_shard}

    def reachable(self, axes: frozenset[str]) -> set[tuple[int, ...]]:
        """Every shape a collective over ``axes`` gives when it undoes those of
        them that some parameter is sharded on: one set per set of axes (a step
        has a handful), so each collective is one lookup, not a walk over the
        parameters."""
        hit = self._reachable.get(axes)
        if hit is None:
            hit = self._reachable[axes] = set()
            for t in self.sharded:
                undone = axes & self.held[t.index]
                if undone:
                    hit |= self.shapes(t, undone)
        return hit

    def more_sharded(self, axes: frozenset[str]) -> set[tuple[int, ...]]:
        """A parameter's shard cut further on one dimension by mesh axes that neither hold it nor take part
        in the collective over ``axes`` (sorted, any order of its dimensions): its gradient in the layout
        XLA returns the parameter in (an embedding P() coming back P(None, 'tp') has its gradient made
        and summed over the batch axes as tp's half), one set per set of axes."""
        hit = self._more.get(axes)
        if hit is None:
            hit = self._more[axes] = set()
            free = [a for a in sorted(self.sizes) if a not in axes and self.sizes[a] > 1]
            for t in self.params:
                local = _local(t, self.sizes, frozenset())
                for sub in _subsets(frozenset(a for a in free if a not in self.held[t.index])):
                    k = prod(self.sizes[a] for a in sub)
                    hit |= {tuple(sorted(squeezed(local[:d] + (n // k,) + local[d + 1:])))
                            for d, n in enumerate(local) if sub and n % k == 0}
        return hit

    def shapes(self, t: TensorInfo, undone: frozenset[str]) -> set[tuple[int, ...]]:
        key = (t.index, undone)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = _shapes(t, self.sizes, undone)
        return hit


def intent_of(c: Collective, module: HloModule | None, params: tuple[TensorInfo, ...], mesh: MeshInfo,
              users: dict[str, list[HloInstruction]] | None = None, shapes: _ParameterShapes | None = None,
              has_gradients: bool = True) -> str:
    shapes = shapes or _ParameterShapes(params, mesh)
    axes = _axis_names(c.mesh_axes)
    result = squeezed(tuple(c.shape))
    in_loop = c.count > 1 or c.count_is_lower_bound
    ins = module.instruction(c.hlo_name) if module else None
    if c.kind == "all-gather" and axes:
        if _holds(shapes.reachable(axes), result, in_loop) and (ins is None or users is None
                                                 or _feeds_matmul(_pieces(c, ins, module), module, users)):
            return "parameter-gather"
    # A collective matmul (TPU) passes a parameter's shard around a ring of collective-permutes, one step
    # of the gather per matmul: FSDP traffic, split. Its backward half passes a gradient's partial sum
    # around the ring, each device adding its own part: the gradient's reduce-scatter, split.
    if c.kind == "collective-permute" and axes and _holds(shapes.any_shard_size, (prod(result),), in_loop) \
            and ins is not None and users is not None:
        pieces = _pieces(c, ins, module)
        if _feeds_matmul(pieces, module, users):
            return "parameter-gather"
        if has_gradients and _is_backward(ins) and _is_summed(pieces, module, users):
            return "gradient-reduction"
    # A gradient is reduced in the backward pass: not in a program without one, nor by a reduction whose op_name
    # (or, where XLA left none, its operand's) is the forward's: a matmul's partial sums over a sharded dimension.
    backward = has_gradients and "transpose(" in (ins is not None and pass_op_name(ins, module) or "transpose(")
    if c.kind in ("reduce-scatter", "all-reduce") and result and backward:
        # A parameter's shard, or its shard with the reduced axes undone (an all-reduce then a slice, CPU's).
        if _holds(shapes.any_shard, result, in_loop) or _holds(shapes.reachable(axes), result, in_loop):
            return "gradient-reduction"
        # A weight's gradient made by a matmul (or a lookup's scatter-add) in another layout than the weight (w1
        # P('model', None), contracted, gets its gradient transposed) or less sharded, summed over the batch axes.
        if ins is not None and ins.operands and (_is_matmul(operand := module.instruction(ins.operands[0]), module)
                                                 or is_lookup_gradient(operand, module)) \
                and (tuple(sorted(result)) in shapes.less_sharded
                     or tuple(sorted(result)) in shapes.more_sharded(axes)):
            return "gradient-reduction"
    # A shard_map's psum, all_gather or ppermute is the program's own, whatever it sums (a psum of a
    # local reduction is not partial sums XLA chose to leave).
    if ins is not None and asked_by_program(ins):
        return "explicit"
    if ins is not None and c.kind in ("all-reduce", "reduce-scatter") and ins.operands:
        if _is_matmul(module.instruction(summed_values(module, ins)[0]), module):  # GPU's combined sums: the first
            return "activation"
    return "reshard"


def partial_sum_operands(collectives: tuple[Collective, ...], module: HloModule | None
                         ) -> dict[str, tuple[int, int | None]]:
    """For each all-reduce that adds a matmul's partial sums (``activation``): the
    per-device bytes of that matmul's smaller operand, the one gathering instead of
    summing would move (a logits projection contracts a small hidden state into a
    large output; a row-parallel projection contracts a large one into a small),
    and the entry parameter the larger operand is (the weight), when it is one."""
    out: dict[str, tuple[int, int | None]] = {}
    if module is None:
        return out
    index = None
    for c in collectives:
        if c.intent != "activation" or c.kind != "all-reduce":
            continue
        ins = module.instruction(c.hlo_name)
        dot = _matmul_of(module.instruction(ins.operands[0]), module) if ins is not None and ins.operands else None
        if dot is None or dot.opcode not in ("dot", "convolution") or _is_backward(dot):
            continue
        operands = [module.instruction(n) for n in dot.operands]
        sizes = [shape_bytes(o.shape) for o in operands if o is not None]
        if len(sizes) == 2 and min(sizes) > 0:
            index = index or origin_index(module)
            larger = dot.operands[0] if sizes[0] >= sizes[1] else dot.operands[1]
            out[c.hlo_name] = (min(sizes), entry_parameter(module, larger, index))
    return out


def _is_backward(ins: HloInstruction) -> bool:
    """Whether JAX emitted the op for the backward pass (its op_name carries the
    ``transpose(jvp(...))`` of reverse-mode autodiff). There, a contracted
    sharded dimension is the forward's sharded output: the input gradient of a
    column-parallel projection, Megatron's backward all-reduce, which no layout
    of the weight avoids short of giving up tensor parallelism."""
    return "transpose(" in (ins.op_name or "")


def parameters(inputs: tuple[TensorInfo, ...], roundtrips) -> tuple[TensorInfo, ...]:
    """The arguments that are parameters (or optimizer state): floating-point
    inputs that come back as outputs, or every floating-point input of a
    program that returns none of them (inference)."""
    floats = [t for t in inputs if t.dtype.startswith(("f", "bf"))]
    state = {rt.input.index for rt in roundtrips}
    return tuple(t for t in floats if t.index in state) if state else tuple(floats)


def classify(
    collectives: tuple[Collective, ...], module: HloModule | None, params: tuple[TensorInfo, ...], mesh: MeshInfo,
) -> tuple[Collective, ...]:
    """The collectives with their ``intent``; without a mesh (compiled HLO alone)
    only the matmul test applies."""
    if not mesh.axes:
        return collectives
    users = module.users() if module is not None else None
    shapes = _ParameterShapes(params, mesh)
    gradients = module is None or has_backward_pass(module)
    return tuple(c.model_copy(update={"intent": intent_of(c, module, params, mesh, users, shapes, gradients)})
                 for c in collectives)


def has_backward_pass(module: HloModule) -> bool:
    """Whether any op comes from reverse-mode autodiff (``transpose(jvp(...))`` in its op_name). An
    evaluation step has none: a reduction there is no gradient's, whatever its shape. A module
    whose metadata was stripped (no op_names at all) cannot say: it counts as having one."""
    named = False
    for comp in module.computations.values():
        for ins in comp.instructions:
            if _is_backward(ins):
                return True
            named = named or ins.op_name is not None
    return not named
