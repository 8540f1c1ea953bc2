"""How every report writes an array's type."""

from __future__ import annotations


def shape_text(dtype: str | None, shape: list[int] | None) -> str:
    return f"{dtype or ''}[{','.join(map(str, shape or []))}]"
