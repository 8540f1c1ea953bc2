"""The collectives one layout change compiles to: a value on one sharding that a
reshard, a sharding constraint, a loop carry or ``out_shardings`` needs on another.

XLA's SPMD partitioner moves only the axes that change, dimension by dimension
(``spmd_partitioner.cc``'s ``ReshardNoCache``): with ``src`` and ``dst`` the two
shardings of one value, each dimension keeps the axes its two shardings share
as a leading prefix; every other axis ``src`` holds there

- is gone from ``dst``: an all-gather of those axes (it returns the value less
  them, so it moves the per-device size ``dst`` ends up with);
- is on another dimension of ``dst``: an all-to-all of the local shard;
- is on the same dimension in another order: a collective-permute of the shard.

An axis leaving a dimension for smaller new ones there is permuted into place and
gathered only by the part they do not cover. Any other axis ``dst`` holds that
``src`` did not costs nothing: each device slices the part it keeps. A value
that only gains axes compiles to no collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..common.axes import Axes, AxisRef, size_of
from ..common.shapes import array_bytes


@dataclass(frozen=True)
class LayoutMove:
    """One collective of a layout change: its kind, the axes it runs over, the
    bytes each device receives, and what its axes do, in words."""

    kind: str
    axes: Axes
    bytes: int
    verb: tuple[str, str]  # what one axis does, what several do

    def sentence(self, labels: Sequence[str]) -> str:
        names = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
        return f"{names} {self.verb[len(labels) > 1]}"


def _local_bytes(dtype: str, shape: Sequence[int], dims: Sequence[Axes]) -> int:
    return array_bytes(dtype, [-(-n // size_of(axes)) for n, axes in zip(shape, dims)])


def _kept_prefix(have: Axes, want: Axes) -> int:
    n = 0
    while n < min(len(have), len(want)) and have[n] == want[n]:
        n += 1
    return n


def layout_moves(dtype: str, shape: Sequence[int], src: Sequence[Axes], dst: Sequence[Axes]) -> list[LayoutMove]:
    """The collectives that take a value of this type from ``src``'s dimension
    shardings to ``dst``'s, in the order XLA runs them."""
    src, dst = list(src), list(dst)
    src += [()] * (len(shape) - len(src))
    dst += [()] * (len(shape) - len(dst))
    dim_of = {ref: d for d, axes in enumerate(dst) for ref in axes}
    held = {ref for axes in src for ref in axes}
    gathered: list[AxisRef] = []
    across: list[AxisRef] = []
    permuted: list[AxisRef] = []
    for d, (have, want) in enumerate(zip(src, dst)):
        keep = _kept_prefix(have, want)
        leaving = [r for r in have[keep:] if r not in dim_of]
        arriving = [r for r in want[keep:] if r not in held]
        for ref in have[keep:]:
            target = dim_of.get(ref)
            if target is not None:
                (across if target != d else permuted).append(ref)
        if len(leaving) == 1 and arriving and leaving[0][2] % size_of(tuple(arriving)) == 0:
            # One axis gives way to smaller new ones on the same dimension: XLA permutes
            # the shards into place and gathers only the part of the axis they do not
            # cover (x of 4 to y of 2: a permute over x and y, an all-gather over x:(1)2).
            name, pre, size = leaving[0]
            permuted.extend(leaving + arriving)
            rest = size // size_of(tuple(arriving))
            if rest > 1:
                gathered.append((name, pre, rest))
        else:
            gathered.extend(leaving)
    local = _local_bytes(dtype, shape, src)
    moves: list[LayoutMove] = []
    if permuted:
        moves.append(LayoutMove("collective-permute", tuple(dict.fromkeys(permuted)), local,
                                ("changes places on a dimension", "change places on a dimension")))
    if gathered:
        factor = size_of(tuple(gathered))
        moves.append(LayoutMove("all-gather", tuple(gathered), local * factor,
                                ("leaves the value", "leave the value")))
        local *= factor
    if across:
        moves.append(LayoutMove("all-to-all", tuple(across), local,
                                ("moves to another dimension", "move to other dimensions")))
    return moves
