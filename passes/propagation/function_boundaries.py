"""Where Shardy's semantics sit outside a single op's factor rule: which mesh an
op's shardings share (an op on two meshes is not propagated through), and its
export at function boundaries (arguments and call results keep only what
divides their shape; the main function's arguments drop sub-axes)."""

from __future__ import annotations

from math import gcd
from typing import Literal

from ..common.axes import Axes, AxisRef, merge_adjacent, size_of
from ..common.device_groups import MeshInfo
from .graph import ShardingGraph, Step


def common_mesh(g: ShardingGraph, step: Step) -> MeshInfo | None | Literal[False]:
    """Shardy's ``getCommonMeshOrRef``: the one mesh the step's shardings are on,
    empty meshes aside; False where two differ (the op is not propagated through),
    None where none is stated."""
    mesh: MeshInfo | None = None
    for tid in step.tensors:
        other = g.tensors[tid].mesh
        if other is None:
            continue
        if mesh is None or (not mesh.axes and not mesh.device_ids):
            mesh = other
        elif (other.axes or other.device_ids) and other != mesh:
            return False
    return mesh


def evenly_sharded(axes: Axes, dim_size: int) -> Axes:
    """The largest major part of a dimension's axes that divides its size (Shardy's
    ``getEvenlySharded``): whole axes while they divide, then one sub-axis at most."""
    if dim_size % size_of(axes) == 0:
        return axes
    out: list[AxisRef] = []
    remaining = dim_size
    for name, pre, size in axes:
        part = gcd(size, remaining)
        if part == 1:
            break
        out.append((name, pre, part))
        if part != size:
            break
        remaining //= part
    return tuple(out)


def export_boundaries(g: ShardingGraph) -> None:
    """Shardy's export at function boundaries: every function's arguments and every
    call's results are made to divide their shape (padding stays inside a
    function), and the main function's open argument shardings drop sub-axes and
    what follows them (``sdy-remove-sub-axes-in-input-output-shardings``)."""
    for tid in [t for t, _ in g.function_args] + g.call_results:
        t = g.tensors[tid]
        t.dims = [evenly_sharded(merge_adjacent(axes), size) for axes, size in zip(t.dims, t.shape)]
    for tid, func in g.function_args:
        if func != g.entry:
            continue
        t = g.tensors[tid]
        for d, axes in enumerate(t.dims):
            if t.closed[d]:
                continue
            whole = [ref for ref in axes if ref[1] == 1 and ref[2] == g.axis_sizes.get(ref[0])]
            n = next((i for i, ref in enumerate(axes) if ref not in whole), len(axes))
            t.dims[d] = axes[:n]
