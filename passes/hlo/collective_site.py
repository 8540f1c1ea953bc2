"""The instruction whose line a compiled collective is shown at.

XLA's SPMD partitioner inserts a resharding collective (an all-gather, all-to-all or
collective-permute) for the op that reads its result: that op is the user's line. Up to
JAX 0.10 the inserted collective carried that reader's metadata; from 0.12 it carries
the metadata of the data it moves (the line that produced it, a line before, or a scan's
slicing of a stacked parameter; for a parameter just ``op_name="x"`` and no frame).
Attribution must not depend on one compiler's choice, so the site is found from the
program's structure:

* a resharding collective with no location, or the location of an instruction it reads
  (walking back through data movement and into fusions), is shown at the first op that
  reads its result and has a location of its own, else at the ``cond`` or loop that runs it;
* a partial-sum reduction (all-reduce, reduce-scatter) belongs to the op that produced
  the sums: its own metadata where it has a line, else its producer's;
* a collective the program asked for itself (``jax.lax.all_gather`` in a ``shard_map``)
  keeps its own line.

The walks look into fusions (a fusion's metadata is its root's) and out of computations
with one caller (a TPU all-reduce-scatter, XLA 0.12's CPU loop wrapper), and are bounded
per collective, so the pass stays linear in the program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .module import HloInstruction, HloModule

_RESHARDING = frozenset({"all-gather", "all-to-all", "collective-permute"})
_REDUCTIONS = frozenset({"all-reduce", "reduce-scatter"})
# Ops that hand a value on without computing with it: the site is past them.
_DATA_MOVEMENT = frozenset({
    "bitcast", "bitcast-convert", "copy", "reshape", "transpose", "convert", "get-tuple-element", "tuple",
    "all-gather-done", "collective-permute-done", "all-to-all-done", "all-reduce-done", "reduce-scatter-done",
    "async-start", "async-done", "async-update", "copy-start", "copy-done", "optimization-barrier",
    "dynamic-slice", "slice", "broadcast", "parameter",
    # A reshard done in steps (a collective-permute, then an all-gather) has one reader: past them all.
    "all-gather", "all-gather-start", "all-to-all", "collective-permute", "collective-permute-start",
})
# Bounds on the walks (an instruction's neighbourhood, not the program: the pass stays linear).
_MAX_FORWARD = 32
_MAX_BACKWARD = 16
_MAX_FUSED = 64
# JAX's collective primitives, as the last part of an op_name.
_PRIMITIVES = frozenset({"all_gather", "all_to_all", "ppermute", "psum", "pmax", "pmin", "reduce_scatter",
                         "psum_scatter", "pbroadcast", "all_gather_invariant", "ragged_all_to_all", "pvary",
                         "psum_invariant"})
_METADATA_KEYS = ("op_name", "source_file", "source_line", "stack_frame_id")


def collective_site(module: HloModule, ins: HloInstruction, kind: str) -> HloInstruction:
    """``ins`` itself, or the instruction whose line the collective ``ins`` is shown at."""
    if asked_by_program(ins):
        return ins
    if kind in _RESHARDING:
        if _has_line(ins) and not _inherited(module, ins):
            return ins
        return _first_reader(module, ins) or _enclosing_op(module, ins) or ins
    if kind in _REDUCTIONS and not _has_line(ins):
        return _producer(module, ins) or ins
    return ins


def _metadata(ins: HloInstruction) -> tuple[object, ...]:
    return tuple(ins.metadata.get(k) for k in _METADATA_KEYS)


def _location(module: HloModule, ins: HloInstruction) -> tuple[str, int] | None:
    """The innermost frame's file and line. Neither the op_name nor the frame id: a collective
    inserted for a scan's slice says "remat2" or "squeeze" where the slice it moves says
    "dynamic_slice", under another stack, at the same line."""
    stack = module.stack_of(ins)
    return (stack[0].file, stack[0].line) if stack else None


def _has_line(ins: HloInstruction) -> bool:
    meta = ins.metadata
    return meta.get("stack_frame_id") is not None or meta.get("source_line") is not None


def asked_by_program(ins: HloInstruction) -> bool:
    """A collective the program wrote itself (``jax.lax.psum``, ``all_gather``, ``ppermute``... in a
    ``shard_map``): its op_name ends in JAX's primitive."""
    name = str(ins.metadata.get("op_name") or "")
    return name.rsplit("/", 1)[-1] in _PRIMITIVES


def _operands(module: HloModule, ins: HloInstruction) -> Iterable[HloInstruction]:
    for name in ins.operands:
        op = module.by_name.get(name)
        if op is not None:
            yield op


def _fused_locations(module: HloModule, ins: HloInstruction) -> Iterable[tuple[str, int] | None]:
    """The locations of the instructions a fusion holds (its own metadata is its root's)."""
    for attr, name in ins.called():
        if attr != "calls":
            continue
        comp = module.computations.get(name)
        for inner in (comp.instructions[:_MAX_FUSED] if comp else ()):
            yield _location(module, inner)


def _inherited(module: HloModule, ins: HloInstruction) -> bool:
    """Whether the collective's location is that of the data it moves: an instruction it reads
    (through data movement), or one inside a fusion it reads."""
    key = _location(module, ins)
    if key is None:  # a frame id the module's table lacks: no line to keep
        return True

    def through_data_movement(current: HloInstruction) -> Iterable[HloInstruction]:
        moves = current.opcode in _DATA_MOVEMENT or current.opcode == "fusion"
        return _operands(module, current) if moves else ()

    return any(_location(module, current) == key
               or (current.opcode == "fusion" and key in set(_fused_locations(module, current)))
               for current in _walk_back(module, ins, through_data_movement))


def _walk_back(module: HloModule, ins: HloInstruction,
               step: Callable[[HloInstruction], Iterable[HloInstruction]]) -> Iterator[HloInstruction]:
    """What ``ins`` reads, nearest first, for at most _MAX_BACKWARD steps; ``step`` says where the walk
    goes on from an instruction (asked only when the caller wants more)."""
    todo, seen = list(_operands(module, ins)), {ins.name}
    for _ in range(_MAX_BACKWARD):
        if not todo:
            return
        current = todo.pop(0)
        if current.name in seen:
            continue
        seen.add(current.name)
        yield current
        todo.extend(step(current))


def _caller(module: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The one fusion or call whose computation ``ins`` is in (a TPU all-reduce-scatter, XLA 0.12's
    CPU loop wrapper); None for a loop body or a computation called from several places."""
    callers = module.callers().get(module.computation_of(ins.name) or "", [])
    if len(callers) != 1 or callers[0].opcode not in ("fusion", "call"):
        return None
    return callers[0]


def _enclosing_op(module: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The nearest op with a line that runs the computation ``ins`` is in: a ``cond``'s or a loop's
    own line, for a collective XLA 0.12 gave no frame (a branch's reshard of a parameter, with
    ``op_name="a"``) whose result only leaves its branch. Bounded by the nesting depth."""
    current: HloInstruction | None = ins
    for _ in range(_MAX_BACKWARD):
        callers = module.callers().get(module.computation_of(current.name) or "", []) if current else []
        if len(callers) != 1:
            return None
        current = callers[0]
        if _has_line(current):
            return current
    return None


def _first_reader(module: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The first op past data movement that reads ``ins``'s result and has a line. The walk looks
    into a fusion that reads it (a fusion's metadata is its root's: the matmul fused under a
    softmax says "reduce_max"), and past a fusion that only moves data (a copy XLA made to
    relayout what the collective moved, with the collective's metadata: not the op that needed it).
    A reader that computes with the collective's own metadata is the rest of one op's expansion
    (a sharded gather or scatter): that op is the site. A reader that computes and carries no line
    (JAX 0.12's CPU matmul fusions, ``__ynn_fusion``, have no metadata) ends the walk at the
    collective itself: past it, the walk would reach some later op's line (an MoE's second expert
    weight's move was shown at the first weight's einsum, the line of the gradient's next op)."""
    users = module.users()
    own = _metadata(ins)
    todo, seen = [ins], {ins.name}
    for _ in range(_MAX_FORWARD):
        if not todo:
            return None
        current = todo.pop(0)
        readers = users.get(current.name, [])
        caller = _caller(module, current) if current.is_root and not readers else None
        for user in readers or ([caller] if caller else []):  # a called computation's result: its caller's
            if user.name in seen:
                continue
            seen.add(user.name)
            if user is caller:
                todo.append(user)
            elif user.opcode == "fusion":
                inner, computes = _reader_inside(module, user, current.name, own)
                if inner is not None:
                    return inner
                if computes and _has_line(user) and _metadata(user) != own:
                    return user  # computes with it, but its ops carry no lines of their own
                if computes and not _has_line(user):
                    return ins  # the reader carries no line at all: the collective's own is the nearest
                todo.append(user)
            elif _moves_data(user):
                todo.append(user)
            elif not _has_line(user):
                return ins
            else:
                return user
    return None


def _reader_inside(module: HloModule, fusion: HloInstruction, operand: str,
                   own: tuple[object, ...]) -> tuple[HloInstruction | None, bool]:
    """(the first op in ``fusion`` that reads ``operand`` and has a line, whether any op that does
    more than move data reads it). Inside a fusion, an op with the collective's very metadata may
    be the producer's work that XLA sank past the collective (the sine of a value resharded before
    it): an op after it in the fusion, with metadata of its own, is preferred; failing one, the op
    itself (the rest of one op's expansion: a sharded scatter's)."""
    users = module.users()
    todo, computes = _fused_parameters(module, fusion, operand), False
    same: HloInstruction | None = None
    for _ in range(_MAX_FUSED):
        if not todo:
            break
        for user in users.get(todo.pop(0).name, ()):
            moves = _moves_data(user)
            computes = computes or not moves
            if moves or not _has_line(user):
                todo.append(user)
            elif _metadata(user) == own:
                same = same or user
                todo.append(user)
            else:
                return user, True
    return same, computes


def _moves_data(ins: HloInstruction) -> bool:
    """Data movement, or an op the SPMD partitioner generated to reassemble a reshard (its
    slices and concatenates are marked ``is_spmd_generated``)."""
    return ins.opcode in _DATA_MOVEMENT or 'is_spmd_generated="true"' in ins.attr_text


def _fused_parameters(module: HloModule, fusion: HloInstruction, operand: str) -> list[HloInstruction]:
    """The parameters of ``fusion``'s computation that receive ``operand``."""
    called = [name for attr, name in fusion.called() if attr == "calls"]
    comp = module.computations.get(called[0]) if called else None
    if comp is None:
        return []
    index: dict[str, HloInstruction] = module.derived.setdefault("fused_parameters", {}).get(comp.name) or {}
    if not index:
        index = {i.operands[0]: i for i in comp.instructions if i.opcode == "parameter" and i.operands}
        module.derived["fused_parameters"][comp.name] = index
    return [index[str(k)] for k, name in enumerate(fusion.operands) if name == operand and str(k) in index]


def _producer(module: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The op, before data movement, that computed what ``ins`` reduces and has a line."""
    return next((current for current in _walk_back(module, ins, lambda current: _inputs(module, current))
                 if current.opcode not in _DATA_MOVEMENT and _has_line(current)), None)


def _inputs(module: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    """What ``ins`` reads; for a called computation's parameter, its caller's operand."""
    if ins.opcode != "parameter":
        return list(_operands(module, ins))
    caller = _caller(module, ins)
    index = int(ins.operands[0]) if ins.operands and ins.operands[0].isdigit() else -1
    argument = module.by_name.get(caller.operands[index]) if caller and 0 <= index < len(caller.operands) else None
    return [argument] if argument is not None else []


def _sum_site(module: HloModule, op: HloInstruction) -> HloInstruction | None:
    """The op a combined reduction's operand ``op`` is shown at: the op that computed its sums; where XLA left
    that op no line (CPU's rewritten dots), the nearest op between it and the reduction that kept one (the
    bitcast with the dot's op_name and line), never one of the sums' inputs, whose line is another value's."""
    if op.opcode not in _DATA_MOVEMENT:
        return op if _has_line(op) else _producer(module, op)
    kept = op if _has_line(op) else None
    for current in _walk_back(module, op, lambda cur: _inputs(module, cur) if cur.opcode in _DATA_MOVEMENT else []):
        if current.opcode not in _DATA_MOVEMENT:
            return current if _has_line(current) else kept or _producer(module, op)
        kept = kept or (current if _has_line(current) else None)
    return kept or _producer(module, op)


def part_sites(module: HloModule, ins: HloInstruction, kind: str) -> list[HloInstruction | None]:
    """For a collective that moves several values at once (XLA's combiner joins a step's gradient
    all-reduces, a layer's parameter gathers, into one): the instruction each value's line is
    taken from, one per operand. A reduction's part belongs to the op that computed its sums; a
    gathered part to the first op that reads it (the tuple element of the result, or of the
    async done op's)."""
    if kind in _REDUCTIONS:
        return [_sum_site(module, op) for op in _operands(module, ins)]
    users = module.users()
    result = next((u for u in users.get(ins.name, ()) if u.opcode.endswith("-done")), ins)
    elements = {u.attrs.get("index"): u for u in users.get(result.name, ()) if u.opcode == "get-tuple-element"}
    return [_first_reader(module, elements[str(i)]) if str(i) in elements else None
            for i in range(len(ins.operands))]
