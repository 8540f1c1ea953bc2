"""XLA's "Involuntary full rematerialization" warnings, read back as facts.

When the SPMD partitioner finds no collective that takes a value from one
sharding to another, it replicates the value on every device and slices it again,
and says so on stderr (``spmd_partitioner.cc``)::

    [SPMD] Involuntary full rematerialization. The compiler cannot go from sharding
    {devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for HLO
    operation %sin.0 = f32[8,64,8]{2,1,0} sine(%param), sharding={...},
    metadata={op_name="jit(f)/sin" stack_frame_id=2}. As the last resort, ...

XLA up to 0.10 writes tile assignments (``devices=[2,1,4]<=[4,2]T(1,0)``), 0.12
named meshes (``{mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]}``); both are read into
mesh axes per dimension. The value's shape in the message is its per-device
shape under the first sharding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..common.device_groups import DeviceGroupError, MeshInfo, axes_of_groups, device_array
from ..common.shapes import parse_arrays
from ..models.report import Collective, SourceLocation
from ..source.frames import CodeOwnership
from .module import HloModule

MARKER = "Involuntary full rematerialization"
_WARNING = re.compile(
    r"cannot go from sharding (\{.*?\}) to (\{.*?\}) efficiently for HLO operation "
    r"%([\w.\-]+) = (\S+?)(?:\{[\d,]*\})? [\w\-]+\((?:.*?metadata=\{([^}]*)\})?")
_NAMED = re.compile(r"^\{mesh\[([^\]]*)\],\s*\[(.*)\]\}$")
# A value one device holds (a host callback's operand or result): XLA up to 0.10 writes it
# ``{maximal device=0}``, 0.12 ``{single_device[device_id=0]}``.
_ONE_DEVICE = re.compile(r"^\{(?:maximal device=(\d+)|single_device\[device_id=(\d+)\])\}$")
_TILED = re.compile(r"devices=\[([\d,]+)\](<=\[[\d,]+\](?:T\([\d,]+\))?|[\d,]+)")
_METADATA = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def is_partitioner_warning(line: str) -> bool:
    return MARKER in line


@dataclass(frozen=True)
class InvoluntaryRemat:
    """One value XLA replicated to reshard it."""

    instruction: str  # the HLO name in the partitioner's module (often gone from the compiled one)
    dtype: str
    global_shape: tuple[int, ...]
    source_sharding: tuple[tuple[str, ...], ...] | None  # mesh axes per dimension; None if unreadable
    target_sharding: tuple[tuple[str, ...], ...] | None
    op_name: str | None
    stack_frame_id: int | None
    source_file: str | None
    source_line: int | None
    # The device a side's value is on alone, where it is one device's (its mesh axes then read as none).
    source_device: int | None = None
    target_device: int | None = None


def read_involuntary_remats(text: str, mesh: MeshInfo) -> tuple[InvoluntaryRemat, ...]:
    """Every warning in ``text`` once (XLA may partition a module twice), in the order given."""
    found: dict[tuple[object, ...], InvoluntaryRemat] = {}
    for line in text.splitlines():
        m = _WARNING.search(line) if MARKER in line else None
        if m is None:
            continue
        src_text, dst_text, name, shape_text, meta_text = m.groups()
        arrays = parse_arrays(shape_text)
        if len(arrays) != 1:
            continue
        local = arrays[0]
        src = _mesh_axes(src_text, len(local.dims), mesh)
        dst = _mesh_axes(dst_text, len(local.dims), mesh)
        meta = {k: v.strip('"') for k, v in _METADATA.findall(meta_text or "")}
        remat = InvoluntaryRemat(
            instruction=name, dtype=local.dtype,
            global_shape=tuple(n * _tiles(src_text, d, src, mesh) for d, n in enumerate(local.dims)),
            source_sharding=src, target_sharding=dst, op_name=meta.get("op_name"),
            stack_frame_id=_int(meta.get("stack_frame_id")), source_file=meta.get("source_file"),
            source_line=_int(meta.get("source_line")),
            source_device=one_device(src_text), target_device=one_device(dst_text),
        )
        found.setdefault((remat.instruction, remat.source_sharding, remat.target_sharding), remat)
    return tuple(found.values())


def one_device(text: str) -> int | None:
    """The device a sharding puts the whole value on (``{maximal device=0}``), or None."""
    m = _ONE_DEVICE.match(text.strip())
    return int(m.group(1) or m.group(2)) if m else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _tiles(text: str, dim: int, axes: tuple[tuple[str, ...], ...] | None, mesh: MeshInfo) -> int:
    """How many shards the first sharding cuts dimension ``dim`` into."""
    m = _TILED.search(text)
    if m:
        counts = [int(x) for x in m.group(1).split(",")]
        return counts[dim] if dim < len(counts) else 1
    sizes = dict(mesh.axes)
    if axes is None or dim >= len(axes):
        return 1
    return int(np.prod([sizes.get(a.split(":")[0], 1) for a in axes[dim]] or [1]))


def _mesh_axes(text: str, rank: int, mesh: MeshInfo) -> tuple[tuple[str, ...], ...] | None:
    """A sharding's mesh axes per dimension, or None when it cannot be read on this mesh."""
    text = text.strip()
    if text == "{replicated}" or one_device(text) is not None:
        return ((),) * rank
    named = _NAMED.match(text)
    if named:
        dims = re.findall(r"\{([^}]*)\}", named.group(2))
        out = tuple(tuple(a.strip().strip("'\"") for a in d.split(",") if a.strip()) for d in dims[:rank])
        return out + ((),) * (rank - len(out))
    tiled = _TILED.search(text)
    if tiled is None or not mesh.axes:
        return None
    counts = [int(x) for x in tiled.group(1).split(",")]
    try:
        order = tiled.group(2)
        devices = device_array(f"[{tiled.group(1)}]{order}" if order.startswith("<=") else order, counts)
    except (DeviceGroupError, ValueError):
        return None
    out_dims: list[tuple[str, ...]] = []
    for d in range(rank):
        if d >= len(counts) or counts[d] == 1:
            out_dims.append(())
            continue
        # The devices that differ only in this dimension's tile index: one group per line.
        lines = np.moveaxis(devices, d, -1).reshape(-1, counts[d])
        try:
            out_dims.append(tuple(axes_of_groups([list(map(int, g)) for g in lines], mesh)))
        except DeviceGroupError:
            return None
    return tuple(out_dims)


@dataclass(frozen=True)
class LocatedRemat:
    """A warning placed in the compiled program: the user's line that needs the value resharded (the
    reader of the all-gather XLA replicated it with), the library line it went through, and that
    all-gather's HLO name."""

    remat: InvoluntaryRemat
    source: SourceLocation | None
    via: SourceLocation | None
    collective: str | None
    # Where one side is one device's (a host callback's value): the argument whose split the other side has
    # (its index, and the dimension the value's split comes from), where one is found (callback_splits.py).
    argument: tuple[int, int] | None = None


def locate_remats(module: HloModule, remats: tuple[InvoluntaryRemat, ...], collectives: tuple[Collective, ...],
                  ownership: CodeOwnership) -> tuple[LocatedRemat, ...]:
    """Each warning at its line: the compiled all-gather that rebuilt the whole value (dtype and global
    shape; its line is the op that reads it), else an instruction of the compiled program with the
    warned value's metadata (XLA keeps a value's op_name and frame through fusion), else none."""
    out = []
    for r in remats:
        gather = next((c for c in collectives if c.kind == "all-gather" and c.dtype == r.dtype
                       and tuple(c.shape) == r.global_shape), None)
        if gather is not None and gather.source is not None:
            out.append(LocatedRemat(r, gather.source, gather.via, gather.hlo_name))
            continue
        same = module.by_name.get(r.instruction)
        if same is None or same.op_name != r.op_name:
            same = next((i for i in module.by_name.values() if i.op_name == r.op_name
                         and i.metadata.get("stack_frame_id") == r.stack_frame_id), None)
        source, via = module.attribution_of(same, ownership) if same is not None else (None, None)
        out.append(LocatedRemat(r, source, via, gather.hlo_name if gather else None))
    return tuple(out)
