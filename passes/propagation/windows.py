"""Windowed reductions (``reduce_window``: a cumulative sum, a pooling) along a
sharded dimension. Shardy's rule passes the dimension through, so propagation
keeps it sharded; XLA's partitioner then needs each device's window to reach
into its neighbours' rows: a halo exchanged with collective-permutes when the
window is shorter than a shard, the whole dimension all-gathered when it is
longer (a cumulative sum's window spans the dimension)."""

from __future__ import annotations

import re
from typing import Any

from ..common.axes import Axes, size_of

# The windowed ops whose window_dimensions attribute is read.
WINDOWED_OPS = ("stablehlo.reduce_window",)


def window_of(op: Any) -> tuple[tuple[int, int], ...] | None:
    """The op's window per dimension (its size, and the padding below it), or None for an op with no window."""
    if op.name not in WINDOWED_OPS or "window_dimensions" not in op.attributes:
        return None
    sizes = [int(n) for n in op.attributes["window_dimensions"]]
    padding = op.attributes["padding"] if "padding" in op.attributes else None
    # dense<[[low, high], ...]> : tensor<Nx2xi64>, or dense<0> when there is none.
    numbers = [int(n) for n in re.findall(r"-?\d+", str(padding).split(" : ")[0])] if padding is not None else []
    low = numbers[0::2] if len(numbers) == 2 * len(sizes) else [0] * len(sizes)
    return tuple(zip(sizes, low))


def window_moves(shape: tuple[int, ...], dims: list[Axes], window: tuple[tuple[int, int], ...],
                 per_device: int) -> list[tuple[str, Axes, int, int]]:
    """(kind, axes, bytes each device receives, dimension) for each sharded dimension a
    window longer than one element reads along: the whole dimension gathered, or the rows
    below (the padding's side) and above from each neighbour, one collective-permute each."""
    out = []
    for d, (n, axes, (w, low)) in enumerate(zip(shape, dims, window)):
        if w <= 1 or not axes:
            continue
        local = -(-n // size_of(axes))
        if w > local:
            out.append(("all-gather", axes, per_device * size_of(axes), d))
            continue
        for rows in (low, w - 1 - low):
            if rows > 0:
                out.append(("collective-permute", axes, per_device * rows // local, d))
    return out
