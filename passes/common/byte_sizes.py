"""Byte sizes as people write them: ``80GiB``, ``1.5 TB``, ``512MiB``, ``1048576``."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int) -> int:
    """Bytes for a size string; raises ValueError naming what was wrong."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return text
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS or len(m.group(1)) > 30:
        raise ValueError(f"not a size: {str(text)[:40]!r} (write e.g. 80GiB, 512MiB, 1.5TB or a byte count)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def per_process_count(bytes_by_processes: list[tuple[int, int]]) -> str:
    """Bytes at each process count: ``1 process: none, 2 processes: 128.0 MiB``."""
    return ", ".join(f"{n} process{'es' if n > 1 else ''}: {format_bytes(b) if b else 'none'}"
                     for n, b in bytes_by_processes)


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{sign}{n / size:,.1f} {unit}"
    return f"{sign}{n:,} B"


def format_signed_bytes(n: int) -> str:
    """A change in bytes with its direction: ``+30.0 KiB`` (more), ``-127.0 KiB`` (less), ``±0 B`` (none);
    lint's fix figures and rewrite's change column both write it so."""
    return ("+" if n > 0 else "-" if n < 0 else "±") + format_bytes(abs(n))
