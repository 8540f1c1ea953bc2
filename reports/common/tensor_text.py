"""How every report writes an array's type, the op that made it, and a live buffer's origin."""

from __future__ import annotations

from ...passes.models.report import LiveBuffer, where_text


def shape_text(dtype: str | None, shape: list[int] | None) -> str:
    return f"{dtype or ''}[{','.join(map(str, shape or []))}]"


def short_op_name(op: str) -> str:
    """``jit(step)/jvp()/while/body/x/dot_general`` -> ``.../x/dot_general``: the tail names the op."""
    parts = op.split("/")
    if len(parts) > 1 and parts[0].startswith("jit("):
        parts = parts[1:]
    text = "/".join(parts)
    return text if len(text) <= 32 else ".../" + "/".join(parts[-2:])[-28:]


def live_buffer_source(b: LiveBuffer, with_via: bool = True) -> str:
    """Where a buffer live at the peak comes from: the user's line (and the library line it went
    through, unless a column of its own shows that), or for an argument, which has no line of its
    own, its pytree path (XLA's op name for it)."""
    if b.source is None and b.name.startswith("param") and b.op_name:
        return f"argument {b.op_name}"
    return where_text(b.source, b.via if with_via else None)
