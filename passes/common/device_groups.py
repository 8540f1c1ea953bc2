"""Device groups of compiled collectives, mapped back to the user's mesh axes.

XLA prints replica groups in four syntaxes: explicit lists (``{{0,1},{2,3}}``),
iota tiles (``[2,4]<=[4,2]T(1,0)``), meshes with its own axis names
(``mesh['axis_0'=4,'axis_1'=2] {'axis_0'}``), and collective-permute's
``source_target_pairs``. All become explicit groups of logical device ids,
which are then located on the user's mesh (from the StableHLO ``sdy.mesh``) so a
report says ``data`` rather than XLA's internal ``axis_0``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from math import prod

import numpy as np

# Far more devices than any slice; a group table past it is malformed input.
MAX_GROUP_DEVICES = 1 << 20


class DeviceGroupError(ValueError):
    """A replica-group string this module cannot read."""


class MalformedDeviceGroups(DeviceGroupError):
    """Groups that cannot be right whatever XLA meant: letters for device ids, a
    table whose size disagrees with its shape, more devices than any slice."""


@dataclass(frozen=True)
class MeshInfo:
    """The user's mesh: axis names and sizes in order, and the logical device id
    at each mesh position (row-major), which is iota unless the mesh says otherwise."""

    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...] | None = None

    @property
    def size(self) -> int:
        return prod(s for _, s in self.axes) if self.axes else 1

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.axes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    def axis_size(self, name: str) -> int:
        return dict(self.axes)[name]

    def coordinates(self) -> dict[int, tuple[int, ...]]:
        """Mesh coordinates of each logical device (computed once per mesh)."""
        return _coordinates(self.axes, self.device_ids)


@functools.lru_cache(maxsize=64)
def _coordinates(axes: tuple[tuple[str, int], ...], device_ids: tuple[int, ...] | None) -> dict[int, tuple[int, ...]]:
    shape = tuple(s for _, s in axes) or (1,)
    ids = device_ids if device_ids is not None else tuple(range(prod(shape)))
    return {int(d): tuple(int(c) for c in np.unravel_index(i, shape)) for i, d in enumerate(ids)}


def _iota_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?", text.strip())
    if not m:
        raise DeviceGroupError(f"unreadable iota replica groups: {text}")
    out_shape = [int(x) for x in m.group(1).split(",")]
    dims = [int(x) for x in m.group(2).split(",")]
    if prod(dims) != prod(out_shape) or prod(dims) > MAX_GROUP_DEVICES:
        # Checked before the table is built: [4,2]<=[100000000000] would allocate 745 GiB.
        raise MalformedDeviceGroups(f"replica_groups={text.strip()} lists {prod(dims)} devices; the group shape "
                               f"[{','.join(map(str, out_shape))}] has {prod(out_shape)}")
    arr = np.arange(prod(dims)).reshape(dims)
    if m.group(3):
        arr = arr.transpose([int(x) for x in m.group(3).split(",")])
    arr = arr.reshape(out_shape)
    return [list(map(int, row)) for row in arr.reshape(out_shape[0], -1)]


def _explicit_groups(text: str) -> list[list[int]]:
    inner = text.strip()[1:-1].strip()
    if not inner:
        return []
    groups = re.findall(r"\{([^{}]*)\}", inner)
    if not all(re.fullmatch(r"[\d,\s]*", g) for g in groups):
        raise MalformedDeviceGroups(f"replica_groups={text.strip()} is not a list of device numbers")
    return [[int(x) for x in g.split(",") if x.strip()] for g in groups]


_IOTA_ARRAY = re.compile(r"\[([\d,\s]+)\](?:<=\[([\d,\s]+)\])?(?:T\(([\d,\s]+)\))?")


def device_array(text: str, shape: list[int]) -> np.ndarray:
    """A mesh's device order: an iota tile (``[2,2,2]T(2,1,0)``, ``[4,2]<=[8]``) or
    an explicit list of ids, reshaped to the mesh's axis sizes."""
    text = text.strip()
    m = _IOTA_ARRAY.fullmatch(text)
    if m:
        dims = [int(x) for x in (m.group(2) or m.group(1)).split(",")]
        if prod(dims) != prod(shape):
            raise MalformedDeviceGroups(f"device ids {text} list {prod(dims)} devices; the mesh has {prod(shape)}")
        arr = np.arange(prod(dims)).reshape(dims)
        if m.group(3):
            arr = arr.transpose([int(x) for x in m.group(3).split(",")])
        return arr.reshape(shape)
    ids = [int(x) for x in re.findall(r"\d+", text)]
    if len(ids) != prod(shape):
        raise MalformedDeviceGroups(f"device ids ({text}) list {len(ids)} devices; the mesh has {prod(shape)}")
    return np.array(ids).reshape(shape)


def _mesh_groups(text: str) -> list[list[int]]:
    m = re.fullmatch(r"mesh\[([^\]]*)\](?:,\s*device_ids=\((.*)\))?\s*\{(.*)\}", text.strip())
    if not m:
        raise DeviceGroupError(f"unreadable mesh replica groups: {text}")
    names, sizes = [], []
    for part in m.group(1).split(","):
        name, _, size = part.rpartition("=")
        names.append(name.strip().strip("'\""))
        # The mesh form is one this parser reads: a size that is no number is a damaged module, not an
        # unknown form (read as "all devices", mesh['axis_0'=x,'axis_1'=2] was a group of 8).
        if not size.strip().isdigit() or int(size) < 1:
            raise MalformedDeviceGroups(f"replica_groups={text.strip()}: mesh axis {part.strip()} has no size")
        sizes.append(int(size))
    if prod(sizes) > MAX_GROUP_DEVICES:
        raise MalformedDeviceGroups(f"mesh replica groups over {prod(sizes)} devices, more than {MAX_GROUP_DEVICES}")
    devices = device_array(m.group(2), sizes) if m.group(2) else np.arange(prod(sizes)).reshape(sizes)
    # Split every axis into [pre, size, rest] so sub-axes become whole dims.
    split_shape, group_dims = [], []
    selected: dict[int, list[tuple[int, int]]] = {}
    order: list[tuple[int, tuple[int, int] | None]] = []
    for ref in filter(None, (r.strip() for r in m.group(3).split(","))):
        am = re.fullmatch(r"'?([^':]+)'?(?::\((\d+)\)(\d+))?", ref)
        if not am or am.group(1) not in names:
            raise MalformedDeviceGroups(f"replica_groups={text.strip()}: {ref} is not an axis of the mesh")
        idx = names.index(am.group(1))
        sub = (int(am.group(2)), int(am.group(3))) if am.group(2) else None
        order.append((idx, sub))
        selected.setdefault(idx, []).append(sub or (1, sizes[idx]))
    dim_of: dict[tuple[int, tuple[int, int] | None], int] = {}
    for idx, n in enumerate(sizes):
        cuts = sorted(selected.get(idx, []))
        pos = 1
        for pre, size in cuts:
            if pre > pos:
                split_shape.append(pre // pos)
            dim_of[(idx, (pre, size))] = len(split_shape)
            split_shape.append(size)
            pos = pre * size
        if n // pos > 1 or not cuts:
            split_shape.append(n // pos)
    for idx, sub in order:
        group_dims.append(dim_of[(idx, sub or (1, sizes[idx]))])
    arr = devices.reshape(split_shape)
    rest = [d for d in range(arr.ndim) if d not in group_dims]
    group_size = prod(split_shape[d] for d in group_dims) if group_dims else 1
    arr = arr.transpose(rest + group_dims).reshape(-1, group_size)
    return [list(map(int, row)) for row in arr]


def parse_replica_groups(text: str | None, num_devices: int) -> list[list[int]]:
    """Explicit groups of logical device ids; an empty list means all devices."""
    if text is None or text.strip() in ("", "{}"):
        return [list(range(num_devices))]
    t = text.strip()
    if t.startswith("mesh["):
        return _mesh_groups(t)
    if t.startswith("["):
        return _iota_groups(t)
    if t.startswith("{"):
        return _explicit_groups(t) or [list(range(num_devices))]
    raise DeviceGroupError(f"unreadable replica groups: {text}")


def parse_source_target_pairs(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text)]


def _axis_label(name: str, axis_size: int, values: set[int]) -> str | None:
    """``name`` for a whole axis, ``name:(pre)size`` (Shardy's sub-axis notation) for
    an evenly strided part of it, None when the values are no such part."""
    k = len(values)
    if k <= 1:
        return None
    vs = sorted(values)
    stride = vs[1] - vs[0]
    if any(b - a != stride for a, b in zip(vs, vs[1:])):
        return name
    if k == axis_size:
        return name
    return f"{name}:({axis_size // (k * stride)}){k}"


def axes_of_groups(groups: list[list[int]], mesh: MeshInfo) -> list[str]:
    """The mesh axes along which the devices of each group differ.

    Every group of a well-formed collective spans the same axes, so the first
    non-trivial group decides; a group that is no product of mesh (sub-)axes still
    reports the axes it touches.
    """
    coords = mesh.coordinates()
    for group in groups:
        if len(group) < 2 or any(d not in coords for d in group):
            continue
        labels = []
        for a, (name, size) in enumerate(mesh.axes):
            label = _axis_label(name, size, {coords[d][a] for d in group})
            if label:
                labels.append(label)
        return labels
    return []


def axes_of_pairs(pairs: list[tuple[int, int]], mesh: MeshInfo) -> list[str]:
    coords = mesh.coordinates()
    varying: set[int] = set()
    for src, dst in pairs:
        if src in coords and dst in coords:
            varying |= {a for a in range(len(mesh.axes)) if coords[src][a] != coords[dst][a]}
    return [mesh.axes[a][0] for a in sorted(varying)]


def spans_hosts(groups: list[list[int]], processes: tuple[int, ...]) -> bool:
    return any(len({processes[d] for d in g if d < len(processes)}) > 1 for g in groups)


def axis_scopes(mesh: MeshInfo, processes: tuple[int, ...]) -> dict[str, str]:
    """Whether moving along each mesh axis stays on one host or crosses hosts."""
    coords = mesh.coordinates()
    by_coord = {c: d for d, c in coords.items()}
    out = {}
    for a, (name, size) in enumerate(mesh.axes):
        crosses = False
        for d, c in coords.items():
            for k in range(size):
                other = by_coord.get(c[:a] + (k,) + c[a + 1:])
                if other is not None and d < len(processes) and other < len(processes) \
                        and processes[d] != processes[other]:
                    crosses = True
                    break
            if crosses:
                break
        out[name] = "cross-host" if crosses else "within-host"
    return out
