"""Every collective a compiled HLO module runs, with per-device bytes, mesh axes,
execution count and the user's source line.

Collectives are found wherever the entry computation can reach them: inside
fusions, async wrappers, while bodies (multiplied by XLA's ``known_trip_count``)
and conditional branches (on the loop trips whose counter selects them, branch_trips.py; a branch data
selects counted by the trips certainly taking it, a lower bound, ``count_in_branch``).
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
from .branch_trips import branch_computations, branch_trips
from .collective_site import collective_site, part_sites
from .loop_bounds import inferred_trip_count, loop_trip_bound
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


@dataclass(frozen=True)
class Multiplicity:
    """How many times each computation runs per execution of ENTRY.

    ``counts``: XLA's trip counts multiply; a loop whose trip count XLA does not know counts once, or,
    given ``assumed_trips`` (``--loop-trips``), that many times per run of the known loops around it (once
    per nest of such loops: a solver's step loop and its stage loop together), never more than ``upper``.
    ``unknown``: the computations inside such loops. ``upper``: the counts were every such loop to run to the
    bound its condition proves (loop_bounds.loop_trip_bound), None where one has none. A conditional's branch
    runs on the loop trips that select it (branch_trips.py); ``in_branch``: the branches (and what they call)
    data selects, counted by the trips certainly taking them, ``upper`` by the trips that may."""

    counts: dict[str, int]
    unknown: frozenset[str]
    upper: dict[str, int | None]
    assumed_trips: int | None = None
    in_branch: frozenset[str] = frozenset()


def computation_multiplicity(module: HloModule, assumed_trips: int | None = None) -> Multiplicity:
    """Worked out once per module and hint: the collective and cost passes both ask."""
    key = f"multiplicity:{assumed_trips}"
    hit = module.derived.get(key)
    if hit is None:
        hit = module.derived[key] = _multiplicity(module, assumed_trips)
    return hit


def _multiplicity(module: HloModule, assumed_trips: int | None) -> Multiplicity:
    callers: dict[str, list[tuple[str, HloInstruction, str]]] = defaultdict(list)
    for comp in module.computations.values():
        for ins in comp.instructions:
            for attr, callee in ins.called():
                if callee in module.computations:
                    callers[callee].append((comp.name, ins, attr))

    # Per computation: (runs counting unknown loops once, runs with the hint, runs at the loops' bounds).
    runs: dict[str, tuple[int, int, int | None]] = {module.entry: (1, 1, 1)}
    unknown: set[str] = set()
    in_branch: set[str] = set()
    hint = assumed_trips or 1

    def visit(name: str, stack: tuple[str, ...]) -> tuple[int, int, int | None]:
        if name in runs:
            return runs[name]
        once = hinted = 0
        upper: int | None = 0
        for caller, ins, attr in callers.get(name, []):
            if caller in stack:
                continue
            n, h, u = visit(caller, stack + (name,))
            nested = caller in unknown
            if nested:
                unknown.add(name)
            if ins.opcode == "while" and attr in ("body", "condition"):
                extra = 1 if attr == "condition" else 0
                trip = ins.known_trip_count()
                if trip is None:
                    trip = inferred_trip_count(module, ins)
                if trip is None:
                    unknown.add(name)
                    bound = loop_trip_bound(module, ins)
                    u = None if bound is None or u is None else u * (bound + extra)
                    h = h if nested else h * (hint + extra)
                else:
                    n, h, u = n * (int(trip) + extra), h * (int(trip) + extra), None if u is None else u * (
                        int(trip) + extra)
            elif ins.opcode == "conditional":
                low, high, trips = _branch_share(module, ins, name)
                n, h, u = n * low // trips, h * low // trips, None if u is None else u * high // trips
                if low != high:
                    in_branch.add(name)
            if caller in in_branch:
                in_branch.add(name)
            once, hinted = once + n, hinted + h
            upper = None if upper is None or u is None else upper + u
        runs[name] = (once, hinted, upper)
        return runs[name]

    for name in sorted(module.computations):
        visit(name, ())
    counts = {name: (h if upper is None else min(h, upper)) if assumed_trips and name in unknown else once
              for name, (once, h, upper) in runs.items()}
    return Multiplicity(counts, frozenset(unknown), {name: r[2] for name, r in runs.items()}, assumed_trips,
                        frozenset(in_branch))


def _branch_share(module: HloModule, conditional: HloInstruction, branch: str) -> tuple[int, int, int]:
    """(trips certainly taking a branch, trips that may, trips) per run of the loop around its conditional
    (branch_trips.py): the branch runs that share of its conditional's runs."""
    taken = branch_trips(module, conditional)
    picked = [t for b, t in zip(branch_computations(conditional), taken.taken) if b == branch]
    return sum(t[0] for t in picked), sum(t[1] for t in picked), taken.trips


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
    ownership: CodeOwnership = DEFAULT_OWNERSHIP, assumed_trips: int | None = None,
) -> CollectivesResult:
    """``assumed_trips``: the user's count for loops whose trip count XLA does not know (``--loop-trips``)."""
    loops = computation_multiplicity(module, assumed_trips)
    counts, unknown = loops.counts, loops.unknown
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
        in_branch = comp.name in loops.in_branch
        if runs == 0 and not (in_branch and loops.upper.get(comp.name) != 0):
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
                group_size=group_size, count_is_lower_bound=(comp.name in unknown and not assumed_trips) or in_branch,
                count_assumed=comp.name in unknown and bool(assumed_trips), count_in_branch=in_branch,
                count_upper_bound=loops.upper.get(comp.name) if comp.name in unknown or in_branch else None,
                cross_host=cross,
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
            "count_is_lower_bound": anchor.count_is_lower_bound, "count_assumed": anchor.count_assumed,
            "count_upper_bound": anchor.count_upper_bound, "count_in_branch": anchor.count_in_branch})
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
