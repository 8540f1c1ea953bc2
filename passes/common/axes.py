"""Mesh axes and sub-axes as values: what a dimension or factor is sharded on.

An axis reference is ``(name, pre, size)``: the whole axis ``x`` of size 4 is
``("x", 1, 4)``; Shardy's sub-axis ``"x":(2)2`` (the minor half) is
``("x", 2, 2)``. Factor shardings split whole axes into sub-axes when a factor
is smaller than an axis (a reshape of 256 into 2 x 128 on an axis of 4), and
dimension shardings merge adjacent sub-axes back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from math import gcd, prod

AxisRef = tuple[str, int, int]
Axes = tuple[AxisRef, ...]
_SUB_AXIS = re.compile(r"(.+):\((\d+)\)(\d+)")  # Shardy's "data:(2)2": name, pre-size, size


def sharding_labels(dims: Sequence[Axes], axis_sizes: dict[str, int]) -> tuple[tuple[str, ...], ...]:
    """A tensor's dimension shardings as axis labels per dimension (``label``)."""
    return tuple(tuple(label(r, axis_sizes) for r in axes) for axes in dims)


def label(ref: AxisRef, axis_sizes: dict[str, int]) -> str:
    name, pre, size = ref
    if pre == 1 and size == axis_sizes.get(name):
        return name
    return f"{name}:({pre}){size}"


def axes_in_words(labels: Sequence[str], axis_sizes: dict[str, int]) -> str:
    """Mesh axis labels as a reader says them: whole axes by name, a Shardy sub-axis
    (``fsdp:(2)2``, notation only docs/reports.md explains) in words: ``fsdp, tp and
    pairs of fsdp devices next to each other``."""
    whole: list[str] = []
    parts: list[str] = []
    for text in labels:
        m = _SUB_AXIS.fullmatch(text)
        total = axis_sizes.get(m.group(1)) if m else None
        if m is None or not total:
            whole.append(text)
            continue
        name, pre, size = m.group(1), int(m.group(2)), int(m.group(3))
        stride = total // (pre * size) if pre * size else 1
        groups = "pairs" if size == 2 else f"groups of {size}"
        apart = "next to each other" if stride == 1 else f"{stride} apart"
        parts.append(f"{groups} of {name} devices {apart}")
    said = whole + parts
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 and parts else ", ".join(said)


def axes_text(labels: Sequence[str], axis_sizes: dict[str, int], sep: str = ",") -> str:
    """Mesh axis labels for a table cell or a gate metric: joined by ``sep`` as they are while all are whole
    axes; with a Shardy sub-axis among them (``data:(2)2``, which a reader cannot be expected to decode), all
    in words (``axes_in_words``: ``pairs of data devices next to each other``)."""
    if not any(_SUB_AXIS.fullmatch(text) and axis_sizes.get(text.split(":(")[0]) for text in labels):
        return sep.join(labels)
    return axes_in_words(labels, axis_sizes)


def size_of(axes: Axes) -> int:
    return prod(s for _, _, s in axes) if axes else 1


def overlaps(a: AxisRef, b: AxisRef) -> bool:
    """Whether two references share devices along the same mesh axis."""
    if a[0] != b[0]:
        return False
    return a[1] < b[1] * b[2] and b[1] < a[1] * a[2]


def merge_adjacent(axes: Axes) -> Axes:
    """``x:(1)2, x:(2)2`` -> ``x:(1)4`` (the whole axis when it covers it)."""
    out: list[AxisRef] = []
    for ref in axes:
        if out and out[-1][0] == ref[0] and out[-1][1] * out[-1][2] == ref[1]:
            name, pre, size = out.pop()
            out.append((name, pre, size * ref[2]))
        else:
            out.append(ref)
    return tuple(out)


def split_for_factors(axes: Axes, factor_sizes: list[int]) -> list[Axes]:
    """Project a dimension's axes onto its factors, major factor first, as Shardy's
    ``buildTensorFactorShardings`` does.

    A factor takes axes (size-1 axes always) while they share a divisor with what
    is left of it, splitting an axis into a sub-axis where only part of it fits.
    The minor-most factor takes every remaining axis, divisible or not (Shardy
    pads). Where a non-minor factor is left partly sharded, the rest of the axes
    overflow: they stay on the dimension and no later factor is sharded.
    """
    out: list[list[AxisRef]] = [[] for _ in factor_sizes]
    queue = list(axes)
    for i, fsize in enumerate(factor_sizes):
        if i == len(factor_sizes) - 1:
            out[i].extend(queue)
            break
        room = fsize
        while queue:
            name, pre, size = queue[0]
            part = gcd(room, size)
            if size != 1 and part == 1:
                break
            if size > part:
                out[i].append((name, pre, part))
                queue[0] = (name, pre * part, size // part)
                room //= part
            else:
                out[i].append(queue.pop(0))
                room //= size
        if room > 1 and queue:
            break
    return [tuple(x) for x in out]


def join_factors(parts: list[Axes], factor_sizes: list[int]) -> Axes:
    """A dimension's axes from its factors' axes: a later factor's axes count only
    when every earlier factor is fully sharded (or of size 1)."""
    axes: list[AxisRef] = []
    for i, part in enumerate(parts):
        axes.extend(part)
        if size_of(part) != factor_sizes[i]:
            break
    return merge_adjacent(tuple(axes))


def is_prefix(a: Axes, b: Axes) -> bool:
    return len(a) <= len(b) and tuple(b[: len(a)]) == tuple(a)


def is_prefix_axis(a: AxisRef, b: AxisRef) -> bool:
    """``a`` is a major part of ``b``: ``x:(1)2`` of ``x`` (size 4), or equal."""
    return a[0] == b[0] and a[1] == b[1] and b[2] % a[2] == 0


def compatible_major(old: Axes, new: Axes, can_expand: bool) -> tuple[Axes, bool]:
    """Fold one more tensor's factor axes into the axes compatible so far
    (Shardy's ``getCompatibleMajorAxes``): agreement continues, a sub-axis may
    grow into a larger one, and the first disagreement stops any expansion."""
    result: list[AxisRef] = []
    i = 0
    while i < len(old) and i < len(new):
        o, n = old[i], new[i]
        i += 1
        if o[0] != n[0]:
            return tuple(result), False
        if o == n:
            result.append(n)
        elif is_prefix_axis(n, o):
            if i < len(new):
                result.append(n)
                return tuple(result), False
            result.append(o)
        elif is_prefix_axis(o, n):
            if not can_expand or i < len(old):
                result.append(o)
                return tuple(result), False
            result.append(n)
        else:
            return tuple(result), False
    result.extend(old[i:])
    if can_expand:
        result.extend(new[i:])
    return tuple(result), can_expand


def prefix_without_overlap(ref: AxisRef, other: AxisRef) -> AxisRef | None:
    """The major part of ``ref`` that shares no device with ``other``; None when
    even its first device is shared."""
    if not overlaps(ref, other):
        return ref
    if other[1] > ref[1]:
        size = other[1] // ref[1]
        return (ref[0], ref[1], size) if size > 1 else None
    return None
