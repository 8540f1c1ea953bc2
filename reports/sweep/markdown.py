"""The sweep's ranking as Markdown."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.sweep import SweepRun
from ..common.markdown_text import cell
from .summary import collectives_text, execution_text, fit_text, headline, slowdown_text, slowest_collective_text


def render_sweep_markdown(run: SweepRun) -> str:
    lines = [f"### jax-shard-lint sweep: {cell(run.script or '')}", "", cell(headline(run)), "",
             "| # | candidate | est. time | vs best | peak / device | fits | collectives / step | slowest collective |",
             "| ---: | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for c in run.candidates:
        lines.append(
            f"| {c.rank or '-'} | {cell(c.label)} | {format_seconds(c.seconds)} | {slowdown_text(c)} | "
            f"{format_bytes(c.peak_bytes) if c.peak_bytes is not None else '-'} | {fit_text(c)} | "
            f"{collectives_text(c, c.collective_bytes)} | {cell(slowest_collective_text(c))} |")
    if run.execution is not None:
        lines += ["", cell(execution_text(run))]
    return "\n".join(lines) + "\n"
