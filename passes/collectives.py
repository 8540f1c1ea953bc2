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

from .device_groups import (
    DeviceGroupError, MeshInfo, axes_of_groups, axes_of_pairs, parse_replica_groups, parse_source_target_pairs,
    spans_hosts,
)
from .hlo_shapes import parse_arrays, split_tuple
from .frames import DEFAULT_OWNERSHIP, CodeOwnership
from .hlo_text import HloInstruction, HloModule
from .models import Collective

COLLECTIVE_KINDS = (
    "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "ragged-all-to-all",
)
_START_SUFFIX = "-start"


@dataclass(frozen=True)
class CollectivesResult:
    collectives: tuple[Collective, ...]
    diagnostics: tuple[str, ...]


def _kind(opcode: str) -> str | None:
    base = opcode[: -len(_START_SUFFIX)] if opcode.endswith(_START_SUFFIX) else opcode
    return base if base in COLLECTIVE_KINDS else None


def computation_multiplicity(module: HloModule) -> tuple[dict[str, int], set[str]]:
    """How many times each computation runs per execution of ENTRY, and the ones
    inside loops whose trip count XLA did not prove (counted once per entry)."""
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
                trip = ins.backend_config().get("known_trip_count", {}).get("n")
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


def _replica_groups_text(ins: HloInstruction) -> str | None:
    """The replica groups as one text. In the mesh form with a device order
    (TPU: ``mesh[...], device_ids=([2,2,2]T(2,1,0)) {'axis_0':(2)2}``) the order and
    the axis selection print as a second attribute, which belongs to the first."""
    groups = ins.attrs.get("replica_groups")
    order = ins.attrs.get("device_ids")
    if groups and groups.strip().startswith("mesh[") and order and "{" not in groups:
        return f"{groups}, device_ids={order}"
    return groups


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
    num_devices = mesh.size if mesh and mesh.axes else module.num_partitions
    for comp in module.computations.values():
        runs = counts.get(comp.name, 0)
        if runs == 0:
            continue
        for ins in comp.instructions:
            kind = _kind(ins.opcode)
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
                    groups = parse_replica_groups(_replica_groups_text(ins), num_devices)
                    group_size = len(groups[0]) if groups else num_devices
                    axes = axes_of_groups(groups, mesh) if mesh and mesh.axes else []
                    if processes:
                        cross = spans_hosts(groups, processes)
            except DeviceGroupError as e:
                diagnostics.append(f"{ins.name}: {e}")
            if not axes and group_size > 1:
                axes = [f"<{group_size} devices>"]
            source, via = module.attribution_of(ins, ownership)
            found.append(Collective(
                kind=kind, bytes=nbytes, count=runs, mesh_axes=axes,
                shape=list(main.dims) if main else [], dtype=main.dtype if main else "",
                op_name=ins.op_name, source=source, via=via, hlo_name=ins.name,
                computation=comp.name, is_async=ins.opcode.endswith(_START_SUFFIX),
                group_size=group_size, count_is_lower_bound=comp.name in unknown, cross_host=cross,
            ))
    found.sort(key=lambda c: (-c.bytes * c.count, c.kind, c.hlo_name))
    return CollectivesResult(tuple(found), tuple(diagnostics))
