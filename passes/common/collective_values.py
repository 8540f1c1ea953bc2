"""How a message names what a collective moves: XLA's op is often a tuple (its combiner joins a step's
gradient all-reduces into one; an all-to-all sends one value as several arrays), and its bytes are all of them,
so a message that printed one shape beside the tuple's bytes (``f32[8192, 256] (26.0 MiB)`` for a 4-tuple)
named a value of another size than the figure beside it. Duck-typed on the report's Collective (``dtype``,
``shape``, ``bytes``, ``parts``), so the rules and the renderers write it the same way."""

from __future__ import annotations

from typing import Any

from .shapes import array_bytes


def value_count(c: Any) -> int:
    """How many arrays the collective moves: its parts (a combined collective's values), else, where its
    bytes are a whole multiple of its array's (a tuple of one shape: an all-to-all's chunks), that multiple."""
    if len(c.parts) >= 2:
        return len(c.parts)
    one = _one_array(c)
    return c.bytes // one if one and c.bytes > one and c.bytes % one == 0 else 1


def _one_array(c: Any) -> int:
    """The bytes of the collective's (largest) array; 0 where its element type is not one we size."""
    try:
        return array_bytes(c.dtype, c.shape) if c.dtype else 0
    except ValueError:
        return 0


def values_text(c: Any) -> str:
    """``f32[8192, 256]`` for one array; ``4 values (f32[8192, 256] x3, f32[2048, 256])`` for a tuple, largest
    first; ``values, the largest f32[...]`` where the bytes say there are others of unknown shapes."""
    one = f"{c.dtype}{list(c.shape)}"
    if len(c.parts) >= 2:
        counts: dict[str, int] = {}
        for p in c.parts:
            text = f"{p.dtype}{list(p.shape)}"
            counts[text] = counts.get(text, 0) + 1
        listed = ", ".join(t + (f" x{n}" if n > 1 else "") for t, n in counts.items())
        return f"{len(c.parts)} values ({listed})"
    n = value_count(c)
    if n > 1:
        return f"{n} values ({one} x{n})"
    if 0 < _one_array(c) < c.bytes:
        return f"values, the largest {one}"
    return one
