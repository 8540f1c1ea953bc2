"""What is live at the memory peak, said in a message (SL301 and SL302 share it)."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..models.report import LiveBuffer
from .context import RuleContext


def peak_culprit(ctx: RuleContext) -> LiveBuffer | None:
    buffers = ctx.memory.live_at_peak if ctx.memory else []
    top = next((b for b in buffers if b.source is not None), None)
    return top


def peak_detail(ctx: RuleContext) -> str:
    top = peak_culprit(ctx)
    if top is None:
        return ""
    what = f"{top.dtype}{top.shape}" if top.shape is not None else top.name
    copy = f", {top.per_member_copy}" if top.per_member_copy is not None else ""
    return (f"; the largest buffer live at the peak is {what} ({format_bytes(top.bytes)}) from "
            f"{top.op_name or top.name}{copy}")
