"""Windowed reductions (``reduce_window``: a cumulative sum, a pooling) along a
sharded dimension. Shardy's rule passes the dimension through, so propagation
keeps it sharded; XLA's partitioner then needs each device's window to reach
into its neighbours' rows: a halo exchanged with collective-permutes when the
window is shorter than a shard, the whole dimension all-gathered when it is
longer (a cumulative sum's window spans the dimension)."""

from __future__ import annotations

from typing import Any

from ..common.axes import Axes, size_of

# The windowed ops whose window_dimensions attribute is read.
WINDOWED_OPS = ("stablehlo.reduce_window",)


def window_of(op: Any) -> tuple[int, ...] | None:
    """The op's window size per dimension, or None for an op with no window."""
    if op.name not in WINDOWED_OPS or "window_dimensions" not in op.attributes:
        return None
    return tuple(int(n) for n in op.attributes["window_dimensions"])


def window_moves(shape: tuple[int, ...], dims: list[Axes], window: tuple[int, ...],
                 per_device: int) -> list[tuple[str, Axes, int, int]]:
    """(kind, axes, bytes each device receives, dimension) for each sharded dimension a
    window longer than one element reads along."""
    out = []
    for d, (n, axes, w) in enumerate(zip(shape, dims, window)):
        if w <= 1 or not axes:
            continue
        local = -(-n // size_of(axes))
        if w > local:
            out.append(("all-gather", axes, per_device * size_of(axes), d))
        else:
            out.append(("collective-permute", axes, per_device * (w - 1) // local, d))
    return out
