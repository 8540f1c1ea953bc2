"""A compiler's out-of-memory refusal, read as a measurement.

XLA's TPU compiler knows the program's memory before it runs and refuses one that
does not fit the chip: ``RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total
memory required for HLO temporaries (19.10G) exceeds available HBM (15.75G).``
That is the figure a user asked for (the step does not fit, by how much), not a
failure of the analysis: the report carries it as the over-budget finding, and
``fit`` reads it as "does not fit".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "(19.10G) exceeds available HBM (15.75G)", "24.92G exceeds 15.75G", "Used 24.92G of 15.75G hbm": XLA prints
# sizes with HumanReadableNumBytes, powers of 1024.
_SIZE = r"(\d+(?:\.\d+)?)\s*([KMGTP]i?)?B?"
_EXCEEDS = re.compile(r"\(?" + _SIZE + r"\)?\s+exceeds\s+(?:the\s+)?(?:available\s+)?(?:\w+\s+)?\(?" + _SIZE + r"\)?")
_USED_OF = re.compile(r"Used\s+" + _SIZE + r"\s+of\s+" + _SIZE)  # "Used 24.92G of 15.75G hbm."
_OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED|[Oo]ut of memory|OOM", re.S)
_WHAT = re.compile(r"required for ([\w ]+?) \(")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


@dataclass(frozen=True)
class CompilerRefusal:
    """The compiler's own figures for a program it would not compile."""

    required_bytes: int  # what the program needs (XLA rounds to two decimals of a unit)
    available_bytes: int  # what the device offers it
    what: str  # what the compiler counted: "HLO temporaries", or "memory"
    message: str  # the compiler's message, one line


def read_refusal(message: str) -> CompilerRefusal | None:
    """The refusal in a compile error's text; None for any other error."""
    if not _OUT_OF_MEMORY.search(message):
        return None
    m = _EXCEEDS.search(message) or _USED_OF.search(message)
    if m is None:
        return None
    required, available = _bytes(m.group(1), m.group(2)), _bytes(m.group(3), m.group(4))
    if required <= available:
        return None
    what = _WHAT.search(message)
    line = " ".join(message.split())
    return CompilerRefusal(required, available, what.group(1) if what else "memory", line[:400])


def _bytes(number: str, unit: str | None) -> int:
    return round(float(number) * _UNITS[(unit or "").rstrip("i")])
