"""The gate's comparison table in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...passes.models.gate import GateResult
from ..common.terminal_safe import terminal_safe


def render_gate(result: GateResult, console: Console) -> None:
    result = terminal_safe(result)
    table = Table(title=f"Against {result.baseline}", title_justify="left")
    for col, kw in (("target", {}), ("metric", {}), ("before", {"justify": "right"}), ("after", {"justify": "right"}),
                    ("ratio", {"justify": "right"}), ("alert", {"style": "red"})):
        table.add_column(col, **kw)
    for r in result.rows:
        ratio = "" if r.ratio is None else ("new" if r.ratio == float("inf") else f"{r.ratio:.3f}x")
        table.add_row(r.target, r.metric, r.display(r.before), r.display(r.after), ratio, r.alert or "")
    console.print(table)
    console.print(Text("gate passed" if result.passed else "gate FAILED: regressions flagged above",
                       style="green" if result.passed else "bold red"))
