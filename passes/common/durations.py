"""Durations as reports print them."""

from __future__ import annotations


def format_seconds(seconds: float | None) -> str:
    """``376 ms``, ``1.91 ms``, ``10.1 us``: three significant digits."""
    if seconds is None:
        return "-"
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{seconds * 1e9:.3g} ns"
