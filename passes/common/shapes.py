"""HLO shape strings (``f32[32,512]{1,0}``, tuples) and their sizes in bytes."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Bits per element. Sub-byte types are packed by XLA, so bytes round up per array.
_DTYPE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4,
    "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8,
    "f8e5m2": 8, "f8e5m2fnuz": 8, "f8e8m0fnu": 8, "token": 0, "opaque": 0, "tuple": 0,
}

# StableHLO / numpy element type spellings mapped to HLO's.
_MLIR_TO_HLO_DTYPE = {
    "i1": "pred", "i2": "s2", "i4": "s4", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
    "ui2": "u2", "ui4": "u4", "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64",
    "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
    "complex<f32>": "c64", "complex<f64>": "c128",
    "f8E4M3FN": "f8e4m3fn", "f8E5M2": "f8e5m2", "f8E4M3": "f8e4m3", "f8E3M4": "f8e3m4",
    "f8E4M3FNUZ": "f8e4m3fnuz", "f8E5M2FNUZ": "f8e5m2fnuz", "f8E4M3B11FNUZ": "f8e4m3b11fnuz",
    "f4E2M1FN": "f4e2m1fn", "f8E8M0FNU": "f8e8m0fnu",
}

_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


@dataclass(frozen=True)
class ArrayShape:
    dtype: str
    dims: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return array_bytes(self.dtype, self.dims)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


def dtype_bits(dtype: str) -> int:
    try:
        return _DTYPE_BITS[dtype]
    except KeyError:
        pass
    # Any width MLIR can spell (i3, ui7, si24, f6E3M2FN) and the index type (64-bit on every target here).
    m = re.fullmatch(r"(?:s|u|i|ui|si|f)(\d+)\w*", dtype)
    if m:
        return int(m.group(1))
    if dtype == "index":
        return 64
    raise ValueError(f"unknown element type {dtype!r}")


def array_bytes(dtype: str, dims: tuple[int, ...] | list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return (n * dtype_bits(dtype) + 7) // 8


def mlir_dtype_to_hlo(element_type: str) -> str:
    return _MLIR_TO_HLO_DTYPE.get(element_type, element_type)


def parse_arrays(shape_text: str) -> list[ArrayShape]:
    """Every array in a shape string, in order; tuples are flattened.

    Layouts (``{1,0}``) and dynamic-dimension markers (``<=128``) are ignored: a
    dynamic dimension counts at its bound, which is what XLA allocates.
    """
    out = []
    for m in _ARRAY_RE.finditer(shape_text):
        dtype, dims_text = m.group(1), m.group(2)
        if dtype not in _DTYPE_BITS:
            continue
        dims = tuple(int(d.strip().lstrip("<=")) for d in dims_text.split(",") if d.strip())
        out.append(ArrayShape(dtype, dims))
    return out


def split_tuple(shape_text: str) -> list[str]:
    """Top-level elements of a tuple shape; a non-tuple shape is its own single element."""
    s = shape_text.strip()
    if not s.startswith("("):
        return [s]
    inner = s[1 : s.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    if inner[start:].strip():
        parts.append(inner[start:].strip())
    return parts


def shape_bytes(shape_text: str) -> int:
    return sum(a.nbytes for a in parse_arrays(shape_text))
