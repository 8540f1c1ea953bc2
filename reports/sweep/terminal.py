"""The sweep's ranking in the terminal."""

from __future__ import annotations

from rich.console import Console

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.sweep import SweepRun
from ..common.terminal_layout import Column, fitted_table
from ..common.terminal_safe import shown, terminal_safe
from .summary import (
    collectives_text,
    compile_time_text,
    execution_text,
    fit_text,
    headline,
    slowdown_text,
    slowest_collective_text,
)


def render_sweep_terminal(run: SweepRun, console: Console) -> None:
    run = terminal_safe(run)
    rows = run.candidates
    budget = f", budget {format_bytes(run.budget_bytes)}" if run.budget_bytes else ""
    console.print(shown(f"{run.script}: {len(rows)} candidate(s) on {run.platform}{budget}", style="bold"))
    columns = [
        Column("#", [str(c.rank) if c.rank else "-" for c in rows], justify="right"),
        Column("candidate", [c.label for c in rows], fold=True),
        Column("est. time", [format_seconds(c.seconds) for c in rows], justify="right"),
        Column("vs best", [slowdown_text(c) for c in rows], justify="right"),
        Column("peak", [format_bytes(c.peak_bytes) if c.peak_bytes is not None else "-" for c in rows],
               justify="right"),
        Column("fits", [fit_text(c) for c in rows]),
        Column("collectives", [collectives_text(c, c.collective_bytes) for c in rows], justify="right"),
        Column("x-host", [collectives_text(c, c.cross_host_bytes) for c in rows], justify="right",
               essential=False),
        Column("slowest collective", [slowest_collective_text(c) for c in rows], essential=False, fold=True),
        Column("compile", [compile_time_text(run, c) for c in rows], justify="right", essential=False),
    ]
    if not any(c.cross_host_bytes for c in rows):
        columns = [c for c in columns if c.header != "x-host"]
    if run.budget_bytes is None:  # no budget, nothing to fit: a column of '-' says nothing
        columns = [c for c in columns if c.header != "fits"]
    title = "Candidates, fastest first among those that fit" if run.budget_bytes else "Candidates, fastest first"
    table = fitted_table(title, columns, console.width)
    console.print(table)
    if not any(c.header == "slowest collective" for c in table.columns):
        # The column that carries a failure's reason did not fit: each reason gets its own line.
        for c in rows:
            if c.error is not None:
                console.print(shown(f"{c.label} failed: {c.error}", style="red"))
    console.print(shown(headline(run), style="green" if any(c.rank for c in rows) else "red"))
    if run.execution is not None:
        console.print(shown(execution_text(run), style="dim"))
