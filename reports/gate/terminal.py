"""The gate's comparison table in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ...passes.models.gate import GateResult
from ..common.terminal_safe import shown, terminal_safe


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
    if result.compiler_change:
        console.print(shown(f"Compilers changed: {result.compiler_change}.", style="yellow"))
    console.print(shown(_verdict(result), style="green" if result.passed else "bold red"))


def _verdict(result: GateResult) -> str:
    if result.rebaselined:
        return "gate passed: re-baselined on the new compilers (the baseline now holds this run's figures)"
    if result.passed:
        return "gate passed"
    if result.compiler_change:
        return "gate FAILED: regressions flagged above, measured across compiler releases"
    return "gate FAILED: regressions flagged above"
