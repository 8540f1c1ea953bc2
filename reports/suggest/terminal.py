"""``suggest`` in the terminal: the versions compiled side by side, the chosen
sharding of each argument, the solver's figures and the Python to paste."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.suggest import SuggestRun
from ..common.terminal_safe import code_text, shown, terminal_safe
from .summary import (
    MAX_ROWS,
    VERSION_HEAD,
    changed_arguments,
    jit_code,
    logical_rule_lines,
    model_note,
    placement_jit,
    placement_why,
    solver_line,
    version_cells,
)


def render_suggest_terminal(run: SuggestRun, console: Console) -> None:
    raw = run  # the Python text is printed as Text, not markup: escaping would put "\\[" into it
    run = terminal_safe(run)
    for r, code in zip(run.targets, raw.targets):
        mesh = " x ".join(f"{n}={s}" for n, s in r.mesh)
        console.print(Rule(f"[bold]{r.name}[/bold]", align="left"))
        budget = f", budget {format_bytes(r.budget_bytes)}" if r.budget_bytes is not None else ", no budget"
        console.print(f"platform {r.platform}, mesh {mesh}, costs on {r.device}{budget}")
        table = Table(title="Compiled versions (chosen marked *)", title_justify="left")
        for col in VERSION_HEAD[:-1]:
            table.add_column(col, justify="left" if col == "version" else "right")
        for v in r.versions:
            cells = version_cells(v)[:-1]
            cells[0] = ("* " if v.name == r.chosen else "  ") + cells[0]
            table.add_row(*cells)
        console.print(table)
        console.print("  " + "; ".join(f"{v.name}: {v.error or v.description}" for v in r.versions[2:]),
                      style="dim")
        if model_note(r):
            console.print("  " + str(model_note(r)), style="dim")
        changed = changed_arguments(r)
        if changed:
            args = Table(title=f"Arguments that change ({len(changed)} of {len(r.arguments)})", title_justify="left")
            args.add_column("argument", overflow="fold")
            args.add_column("written", overflow="fold")
            args.add_column("suggested", overflow="fold")
            args.add_column("per device", justify="right")
            for a in changed[:MAX_ROWS]:
                args.add_row(a.path, pspec_text(a.current), pspec_text(a.suggested),
                             f"{format_bytes(a.current_per_device_bytes)} -> "
                             f"{format_bytes(a.suggested_per_device_bytes)}")
            console.print(args)
            if len(changed) > MAX_ROWS:
                console.print(f"  ... {len(changed) - MAX_ROWS} more (--format json lists all)")
        console.print(shown(r.verdict, style="bold"))
        console.print(f"solver: {solver_line(r)}")
        if code.placement_text:
            console.print(Text.assemble((f"Python ({placement_why(code)}): ", "bold green"),
                                        code_text(code.placement_text)))
            if placement_jit(code):
                console.print(Text.assemble(("then: ", "bold green"), code_text(placement_jit(code) or "")))
        elif jit_code(code):
            console.print(Text("Python:", style="bold green"))
            for line in (jit_code(code) or "").splitlines():  # code_text shows a newline as \x0a
                console.print(Text(code_text(line)), soft_wrap=True)  # not folded: a folded comment would run
        if code.logical_rules is not None:
            for line in logical_rule_lines(r):
                console.print(line)
            console.print(Text.assemble(("Flax: ", "bold green"), code_text(code.logical_rules.rules_text)))
        if r.text_problem:
            console.print(f"no Python text: {r.text_problem}")
        for note in r.notes:
            console.print(f"  note: {note}")
