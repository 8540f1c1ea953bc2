"""``rewrite`` as Markdown: the verdict, before and after, the outputs pinned."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ..common.markdown_text import cell, code_span
from ..common.tensor_text import earlier_sharding_text


def render_rewrite_markdown(run) -> str:

    lines = []
    for r in run.targets:
        lines += [f"### jax-shard-lint rewrite: {cell(r.name)}", "", cell(r.verdict), ""]
        lines += [f"- remaining: {cell(x)}" for x in r.remaining]
        if r.python_fix:
            lines += ["", code_span(f"jax.jit(..., {r.python_fix})"), ""]
        elif r.python_fix_missing:
            lines += ["", f"no Python change: {cell(r.python_fix_missing)}", ""]
        lines += ["| | before | after |", "| --- | ---: | ---: |"]
        for label, attr in (("peak / device", "peak_bytes"), ("collectives / step", "collective_bytes")):
            lines.append(
                f"| {label} | {format_bytes(getattr(r.before, attr))} | {format_bytes(getattr(r.after, attr))} |")
        if r.before.time is not None and r.after.time is not None:
            lines.append(f"| est. step time ({cell(r.after.time.device)}) | {format_seconds(r.before.time.seconds)} | "
                         f"{format_seconds(r.after.time.seconds)} |")
        if r.out_shardings:
            lines += ["", "| output | before | pinned to |", "| --- | --- | --- |"]
            lines += [f"| {cell(a.path)} | {cell(earlier_sharding_text(a.before))} | {cell(pspec_text(a.after))} |"
                      for a in r.out_shardings]
        lines.append("")
    return "\n".join(lines) + "\n"
