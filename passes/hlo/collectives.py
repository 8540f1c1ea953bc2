"""Every collective a compiled HLO module runs, with per-device bytes, mesh axes,
execution count and the user's source line.

Collectives are found wherever the entry computation can reach them: inside
fusions, async wrappers, while bodies (multiplied by XLA's ``known_trip_count``)
and conditional branches (each branch counted once per execution of the
conditional: an upper bound on what runs).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..common.device_groups import (
    DeviceGroupError,
    MeshInfo,
    axes_of_groups,
    axes_of_pairs,
    parse_replica_groups,
    parse_source_target_pairs,
    spans_hosts,
)
from ..common.shapes import ArrayShape, parse_arrays, split_tuple
from ..models.report import Collective, CollectivePart, SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .async_chains import CONTINUATION, DONE, START, async_role, chain_id
from .collective_site import collective_site, part_sites
from .module import HloInstruction, HloModule

COLLECTIVE_KINDS = (
    "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "ragged-all-to-all",
)
_START_SUFFIX = "-start"


@dataclass(frozen=True)
class CollectivesResult:
    collectives: tuple[Collective, ...]
    diagnostics: tuple[str, ...]


def collective_kind(opcode: str) -> str | None:
    """The collective an opcode runs (``all-gather`` for ``all-gather-start``); None for other ops."""
    base = opcode[: -len(_START_SUFFIX)] if opcode.endswith(_START_SUFFIX) else opcode
    return base if base in COLLECTIVE_KINDS else None


def computation_multiplicity(module: HloModule) -> tuple[dict[str, int], set[str]]:
    """How many times each computation runs per execution of ENTRY, and the ones
    inside loops whose trip count XLA did not prove (counted once per entry).
    Worked out once per module: the collective and cost passes both ask."""
    hit = module.derived.get("multiplicity")
    if hit is None:
        hit = module.derived["multiplicity"] = _multiplicity(module)
    return hit


def _multiplicity(module: HloModule) -> tuple[dict[str, int], set[str]]:
    callers: dict[str, list[tuple[str, HloInstruction, str]]] = defaultdict(list)
    for comp in module.computations.values():
        for ins in comp.instructions:
            for attr, callee in ins.called():
                if callee in module.computations:
                    callers[callee].append((comp.name, ins, attr))

    counts: dict[str, int] = {module.entry: 1}
    unknown: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> int:
        if name in counts:
            return counts[name]
        total = 0
        for caller, ins, attr in callers.get(name, []):
            if caller in stack:
                continue
            n = visit(caller, stack + (name,))
            if caller in unknown:
                unknown.add(name)
            if ins.opcode == "while" and attr in ("body", "condition"):
                trip = ins.known_trip_count()
                if trip is None:
                    trip = inferred_trip_count(module, ins)
                if trip is None:
                    unknown.add(name)
                else:
                    n *= int(trip) + (1 if attr == "condition" else 0)
            total += n
        counts[name] = total
        return total

    for name in sorted(module.computations):
        visit(name, ())
    return counts, unknown


_SAME_VALUE = frozenset({"copy", "bitcast", "convert"})
_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}


def _through_copies(module: HloModule, name: str) -> HloInstruction | None:
    ins = module.by_name.get(name)
    while ins is not None and ins.opcode in _SAME_VALUE and ins.operands:
        ins = module.by_name.get(ins.operands[0])
    return ins


def _int_constant(ins: HloInstruction | None) -> int | None:
    if ins is None or ins.opcode != "constant" or len(ins.operands) != 1:
        return None
    try:
        return int(ins.operands[0])
    except ValueError:
        return None


def _tuple_index(ins: HloInstruction | None) -> int | None:
    if ins is None or ins.opcode != "get-tuple-element":
        return None
    try:
        return int(ins.attrs.get("index", ""))
    except ValueError:
        return None


def _op_of(module: HloModule, ins: HloInstruction | None) -> tuple[str, dict[str, str], tuple[str, ...]] | None:
    """(opcode, attributes, operands) of an instruction, looking through a fusion
    that wraps one op of its parameters and constants (``wrapped_compare`` on CPU,
    ``loop_compare_fusion`` with the bound inside on GPU)."""
    if ins is None:
        return None
    if ins.opcode != "fusion":
        return ins.opcode, ins.attrs, ins.operands
    fused = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    root = next((i for i in fused.instructions if i.is_root), None) if fused else None
    if root is None or fused is None:
        return None
    params = {i.name: int(i.operands[0]) for i in fused.instructions
              if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()}
    constants = {i.name for i in fused.instructions if i.opcode == "constant"}  # the GPU fuses the bound in
    if not all((o in params and params[o] < len(ins.operands)) or o in constants for o in root.operands):
        return None
    return root.opcode, root.attrs, tuple(ins.operands[params[o]] if o in params else o for o in root.operands)


def _loop_init(module: HloModule, loop: HloInstruction) -> HloInstruction | None:
    """The tuple a loop starts from. XLA 0.12's CPU compiler wraps a while loop in a computation of
    its own, called with ``call``: the loop's operand is then that computation's parameter, and the
    tuple is the call's operand."""
    init = _through_copies(module, loop.operands[0])
    if init is None or init.opcode != "parameter" or not init.operands or not init.operands[0].isdigit():
        return init
    index = int(init.operands[0])
    callers = [c for c in module.callers().get(module.computation_of(init.name) or "", []) if c.opcode == "call"]
    if len(callers) != 1 or index >= len(callers[0].operands):
        return init
    return _through_copies(module, callers[0].operands[index])


def inferred_trip_count(module: HloModule, loop: HloInstruction) -> int | None:
    """The trip count of a counted loop XLA did not annotate (the TPU compiler
    leaves ``known_trip_count`` out): the condition compares one tuple element with
    a constant, the loop starts it at a constant and the body adds a constant step.
    None unless all three are plain."""
    called = dict(loop.called())
    cond, body = module.computations.get(called.get("condition", "")), module.computations.get(called.get("body", ""))
    if cond is None or body is None or not loop.operands:
        return None
    root = _op_of(module, next((i for i in cond.instructions if i.is_root), None))
    if root is None or root[0] != "compare" or len(root[2]) != 2:
        return None
    direction = root[1].get("direction", "")
    lhs, rhs = (_through_copies(module, o) for o in root[2])
    index, bound = _tuple_index(lhs), _int_constant(rhs)
    if index is None:  # constant on the left: read the comparison the other way round
        index, bound, direction = _tuple_index(rhs), _int_constant(lhs), _FLIPPED.get(direction, "")
    init_tuple = _loop_init(module, loop)
    body_root = next((i for i in body.instructions if i.is_root), None)
    if index is None or bound is None or init_tuple is None or init_tuple.opcode != "tuple" \
            or body_root is None or body_root.opcode != "tuple" or index >= len(init_tuple.operands) \
            or index >= len(body_root.operands):
        return None
    start = _int_constant(_through_copies(module, init_tuple.operands[index]))
    step_op = _op_of(module, _through_copies(module, body_root.operands[index]))
    if start is None or step_op is None or step_op[0] != "add" or len(step_op[2]) != 2:
        return None
    a, b = (_through_copies(module, o) for o in step_op[2])
    step = _int_constant(b) if _tuple_index(a) == index else _int_constant(a) if _tuple_index(b) == index else None
    if not step or step < 0:
        return None
    if direction == "LT":
        return max(0, -(-(bound - start) // step))
    if direction == "LE":
        return max(0, (bound - start) // step + 1)
    if direction == "NE" and (bound - start) % step == 0:
        return max(0, (bound - start) // step)
    return None


def _result_shape(ins: HloInstruction, done_shapes: dict[str, str]) -> str:
    """The shape of what the collective delivers on one device.

    Async starts return bookkeeping tuples (operand, result, scratch...); their
    done op returns the result itself, so prefer that.
    """
    if ins.name in done_shapes:
        return done_shapes[ins.name]
    parts = split_tuple(ins.shape)
    if ins.opcode.endswith(_START_SUFFIX) and len(parts) > 1:
        return parts[1]
    return ins.shape


def find_collectives(
    module: HloModule, mesh: MeshInfo | None, processes: tuple[int, ...] | None = None,
    ownership: CodeOwnership = DEFAULT_OWNERSHIP,
) -> CollectivesResult:
    counts, unknown = computation_multiplicity(module)
    diagnostics: list[str] = []

    done_shapes: dict[str, str] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.opcode.endswith("-done") and ins.operands:
                done_shapes[ins.operands[0]] = ins.shape

    found: list[Collective] = []
    sites: dict[str, HloInstruction] = {}
    num_devices = mesh.size if mesh and mesh.axes else module.num_partitions
    for comp in module.computations.values():
        runs = counts.get(comp.name, 0)
        if runs == 0:
            continue
        for ins in comp.instructions:
            kind = collective_kind(ins.opcode)
            if kind is None:
                continue
            shape_text = _result_shape(ins, done_shapes)
            arrays = parse_arrays(shape_text)
            nbytes = sum(a.nbytes for a in arrays)
            main = max(arrays, key=lambda a: a.nbytes) if arrays else None
            axes: list[str] = []
            group_size = num_devices
            cross = None
            try:
                if kind == "collective-permute":
                    pairs = parse_source_target_pairs(ins.attrs.get("source_target_pairs", ""))
                    group_size = 2 if pairs else 1
                    axes = axes_of_pairs(pairs, mesh) if mesh and mesh.axes else []
                    if processes:
                        cross = spans_hosts([list(p) for p in pairs], processes)
                else:
                    groups = parse_replica_groups(ins.replica_groups_text(), num_devices)
                    group_size = len(groups[0]) if groups else num_devices
                    axes = axes_of_groups(groups, mesh) if mesh and mesh.axes else []
                    if processes:
                        cross = spans_hosts(groups, processes)
            except DeviceGroupError as e:
                diagnostics.append(f"{ins.name}: {e}")
            if not axes and group_size > 1:
                axes = [f"<{group_size} devices>"]
            site = collective_site(module, ins, kind)
            source, via = module.attribution_of(site, ownership)
            sites[ins.name] = site
            parts = _parts(module, ins, kind, arrays, ownership)
            found.append(Collective(
                kind=kind, bytes=nbytes, count=runs, mesh_axes=axes,
                shape=list(main.dims) if main else [], dtype=main.dtype if main else "",
                op_name=ins.op_name, source=source, via=via, hlo_name=ins.name,
                computation=comp.name, is_async=ins.opcode.endswith(_START_SUFFIX),
                group_size=group_size, count_is_lower_bound=comp.name in unknown, cross_host=cross,
                parts=parts,
            ))
    found = _once_per_channel(module, found)
    found = _where_paths_part(module, found, sites, ownership)
    found.sort(key=lambda c: (-c.bytes * c.count, c.kind, c.hlo_name))
    return CollectivesResult(tuple(found), tuple(diagnostics))


_COMBINED_KINDS = frozenset({"all-reduce", "all-gather", "reduce-scatter"})


def _parts(module: HloModule, ins: HloInstruction, kind: str, arrays: list[ArrayShape], ownership: CodeOwnership,
           ) -> list[CollectivePart]:
    """The values a combined collective moves, each at its own line (an all-to-all's tuple is one
    value's chunks, not several values)."""
    if kind not in _COMBINED_KINDS or len(arrays) < 2 or len(arrays) != len(ins.operands):
        return []
    parts = []
    for array, site in zip(arrays, part_sites(module, ins, kind)):
        source, via = module.attribution_of(site, ownership) if site is not None else (None, None)
        parts.append(CollectivePart(shape=list(array.dims), dtype=array.dtype, bytes=array.nbytes,
                                    source=source, via=via))
    # Largest first; equal sizes in program order (sorted is stable).
    return sorted(parts, key=lambda p: -p.bytes)


def _once_per_channel(module: HloModule, found: list[Collective]) -> list[Collective]:
    """One collective per transfer. TPU's async collective fusion splits a collective into a start step,
    continuation steps interleaved with compute and a done step, each a clone of the one collective with
    its channel id and full result shape (async_chains.py): counted apiece, one 31 MiB gather read as
    312 MiB. The pieces are one collective, shown at the start piece (or the first), which lists the
    others, counted as often as the start runs: a continuation inside the layer scan runs once per layer,
    the chain it continues once. A channel id alone does not make pieces: XLA on CPU gives every
    collective of a shard_map ``channel_id=1`` (the forward psum, its transpose and the gradient
    all-reduce), so pieces are clones (one shape, groups, metadata and chain id) that run as steps of an
    async chain."""
    by_channel: dict[tuple[object, ...], list[Collective]] = defaultdict(list)
    roles: dict[str, str] = {}
    for c in found:
        ins = module.instruction(c.hlo_name)
        channel = ins.attrs.get("channel_id") if ins is not None else None
        role = async_role(module, c.computation) if ins is not None and channel else None
        if ins is not None and role is not None:
            roles[c.hlo_name] = role
            by_channel[(c.kind, channel, chain_id(ins.attr_text), tuple(c.shape), c.dtype, tuple(c.mesh_axes),
                        c.group_size, c.op_name)].append(c)
    merged: dict[str, Collective | None] = {}
    for pieces in by_channel.values():
        if len(pieces) < 2:
            continue
        # The start piece, else the done, else the first (min keeps the first of equal keys); the others in
        # module order. The chain runs as often as its start (its done when no start piece is found).
        first = min(pieces, key=lambda c: _ROLE_ORDER[roles[c.hlo_name]])
        anchor = min(pieces, key=lambda c: (_ROLE_ORDER[roles[c.hlo_name]], c.count))
        merged.update({c.hlo_name: None for c in pieces})
        merged[first.hlo_name] = first.model_copy(update={
            "pieces": [c.hlo_name for c in pieces if c is not first], "count": anchor.count,
            "count_is_lower_bound": anchor.count_is_lower_bound})
    kept = (merged.get(c.hlo_name, c) for c in found)
    return [c for c in kept if c is not None]


_ROLE_ORDER = {START: 0, DONE: 1, CONTINUATION: 2}


def _where_paths_part(module: HloModule, found: list[Collective], sites: dict[str, HloInstruction],
                      ownership: CodeOwnership) -> list[Collective]:
    """``called_from`` for collectives that share a source line but not a call path. In a framework every
    projection goes through one helper (MaxText's ``layers/linears.py:110``): the helper's line does not
    say which projection moves the bytes. The frame that does is the helper's caller, where the group's
    paths differ there. (Paths that part further out say little: a forward op and its transpose in the
    backward pass part at the value_and_grad line, in every program.)"""
    by_line: dict[tuple[str, int], list[Collective]] = defaultdict(list)
    for c in found:
        if c.source is not None:
            by_line[(c.source.file, c.source.line)].append(c)
    called_from: dict[str, SourceLocation] = {}
    for group in by_line.values():
        if len(group) < 2:
            continue
        paths = {c.hlo_name: [f for f in module.stack_of(sites[c.hlo_name]) if ownership.is_user(f.file)]
                 for c in group}
        callers = {name: frames[1] if len(frames) > 1 else None for name, frames in paths.items()}
        if len({(f.file, f.line) if f else None for f in callers.values()}) < 2:
            continue
        for name, f in callers.items():
            if f is not None:
                called_from[name] = SourceLocation(file=f.file, line=f.line, function=f.function)
    if not called_from:
        return found
    return [c.model_copy(update={"called_from": called_from[c.hlo_name]}) if c.hlo_name in called_from else c
            for c in found]
