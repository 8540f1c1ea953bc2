"""``suggest`` in the terminal, Markdown and HTML: the versions compiled side by
side, the chosen sharding of each argument (a device grid in HTML), the solver's
figures and the Python to paste."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.suggest import SuggestReport, SuggestRun, Version
from ..common.terminal_safe import code_text, terminal_safe
from ..findings.html import _page, device_grid, e
from ..findings.markdown import _cell
from ..findings.terminal import shape_text

MAX_ROWS = 40  # arguments listed in the terminal and Markdown (the JSON has all)


def _gap(r: SuggestReport) -> str:
    s = r.solver
    if s.gap is None:
        return f"{s.method}: no bound"
    return f"{s.method}: gap {s.gap * 100:.2g}% (objective {format_seconds(s.objective_seconds)}, bound " \
           f"{format_seconds(s.lower_bound_seconds)})"


def _solver_line(r: SuggestReport, plans_inline: bool = True) -> str:
    """The solver's figures; the plans in the line unless a table lists them."""
    s = r.solver
    return (f"{_gap(r)}; {s.variables:,} variables over {s.value_groups:,} value groups and {s.ops:,} ops, "
            f"solved in {s.solve_seconds:.2f} s" + (f" ({s.rounds} rounds)" if s.rounds > 1 else "")
            + (_propagation_text(r) if plans_inline or len(s.plans) <= 1 else ""))


def _propagation_text(r: SuggestReport) -> str:
    """The plans the solver compiled: per solve, its cost model, its arguments'
    layout as propagated, and the compiled estimate (the kept one marked *)."""
    s = r.solver
    if not s.plans:
        return ""

    def one(p) -> str:
        compiled = p.error and "did not compile" or format_seconds(p.estimated_seconds)
        propagated = "-" if p.propagated_seconds is None else format_seconds(p.propagated_seconds)
        return (f"{'*' if p.solve == s.kept else ''}{p.solve}: {format_seconds(p.objective_seconds)} / "
                f"{propagated} / {compiled}")

    if len(s.plans) == 1:
        p = s.plans[0]
        return f"; its plan as propagated {one(p).split(' / ', 1)[1].replace(' / ', ', compiled ')}"
    excluded = max((len(p.excluded) for p in s.plans), default=0)
    return (f"; {len(s.plans)} plan{'' if len(s.plans) == 1 else 's'} (solve: model / propagated / compiled) "
            + ", ".join(one(p) for p in s.plans)
            + (f", {excluded} argument sharding{'' if excluded == 1 else 's'} excluded where propagation carried "
               f"{'it' if excluded == 1 else 'them'} past the plan" if excluded else ""))


_PLAN_HEAD = ("solve", "cost model", "propagated", "values differing", "compiled", "peak / device",
              "argument shardings excluded before it")


def _plan_rows(r: SuggestReport) -> list[list[str]]:
    """One row per solve of the propagation check (the kept one marked *); the
    exclusions each solve added to the ones before it."""
    rows, before = [], 0
    for p in r.solver.plans:
        rows.append([f"{'*' if p.solve == r.solver.kept else ''}{p.solve}", format_seconds(p.objective_seconds),
                     "-" if p.propagated_seconds is None else format_seconds(p.propagated_seconds),
                     "-" if p.differing_values is None else f"{p.differing_values:,}",
                     p.error and "did not compile" or format_seconds(p.estimated_seconds),
                     "-" if p.peak_bytes is None else format_bytes(p.peak_bytes),
                     "; ".join(p.excluded[before:]) or "-"])
        before = len(p.excluded)
    return rows


def _cells(v: Version) -> list[str]:
    if v.error:
        return [v.name, "-", "-", "-", "-", v.error]
    fits = "" if v.fits is None else (" fits" if v.fits else " OVER")
    model = format_seconds(v.model.seconds) if v.model else "-"
    return [v.name, format_bytes(v.peak_bytes or 0) + fits, format_bytes(v.collective_bytes or 0),
            format_seconds(v.estimated_seconds), model, v.description]


_HEAD = ("version", "peak / device", "collectives / step", "est. step", "cost model", "")


def _changed(r: SuggestReport):
    return [a for a in r.arguments if pspec_text(a.current) != pspec_text(a.suggested)]


def render_suggest_terminal(run: SuggestRun, console: Console) -> None:
    raw = run  # the Python text is printed as Text, not markup: escaping would put "\\[" into it
    run = terminal_safe(run)
    for r, code in zip(run.targets, raw.targets):
        mesh = " x ".join(f"{n}={s}" for n, s in r.mesh)
        console.print(Rule(f"[bold]{r.name}[/bold]", align="left"))
        budget = f", budget {format_bytes(r.budget_bytes)}" if r.budget_bytes is not None else ", no budget"
        console.print(f"platform {r.platform}, mesh {mesh}, costs on {r.device}{budget}")
        table = Table(title="Compiled versions (chosen marked *)", title_justify="left")
        for col in _HEAD[:-1]:
            table.add_column(col, justify="left" if col == "version" else "right")
        for v in r.versions:
            cells = _cells(v)[:-1]
            cells[0] = ("* " if v.name == r.chosen else "  ") + cells[0]
            table.add_row(*cells)
        console.print(table)
        console.print("  " + "; ".join(f"{v.name}: {v.error or v.description}" for v in r.versions[2:]),
                      style="dim")
        changed = _changed(r)
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
        console.print(Text(r.verdict, style="bold"))
        console.print(f"solver: {_solver_line(r)}")
        if code.in_shardings_text:
            text = code.in_shardings_text + (", " + code.out_shardings_text if code.out_shardings_text else "")
            console.print(Text.assemble(("Python: ", "bold green"), code_text(f"jax.jit(step, {text})")))
        if r.text_problem:
            console.print(f"no Python text: {r.text_problem}")
        for note in r.notes:
            console.print(f"  note: {note}")


def render_suggest_markdown(run: SuggestRun) -> str:
    lines: list[str] = []
    for r in run.targets:
        lines += [f"### jax-shard-lint suggest: {_cell(r.name)}", "", _cell(r.verdict), "",
                  f"Solver: {_cell(_solver_line(r, plans_inline=False))}", ""]
        lines += ["| " + " | ".join(_HEAD[:-1]) + " |", "| --- | ---: | ---: | ---: | ---: |"]
        for v in r.versions:
            cells = [_cell(c) for c in _cells(v)[:-1]]
            cells[0] = f"**{cells[0]}**" if v.name == r.chosen else cells[0]
            lines.append("| " + " | ".join(cells) + " |")
        if len(r.solver.plans) > 1:
            lines += ["", "| " + " | ".join(_PLAN_HEAD) + " |", "| --- |" + " ---: |" * 5 + " --- |"]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in _plan_rows(r)]
        changed = _changed(r)
        if changed:
            lines += ["", "| argument | written | suggested |", "| --- | --- | --- |"]
            lines += [f"| {_cell(a.path)} | {_cell(pspec_text(a.current))} | {_cell(pspec_text(a.suggested))} |"
                      for a in changed[:MAX_ROWS]]
        if r.in_shardings_text:
            text = r.in_shardings_text + (", " + r.out_shardings_text if r.out_shardings_text else "")
            lines += ["", "```python", f"jax.jit(step, {text})", "```"]
        lines.append("")
    return "\n".join(lines) + "\n"


def render_suggest_html(run: SuggestRun) -> str:
    body = (f"<header><h1>jax-shard-lint suggest</h1><p>{e(run.script or '')} &middot; jax {e(run.jax_version)} "
            f"&middot; jax-shard-lint {e(run.tool_version)}</p></header>")
    for r in run.targets:
        mesh = dict(r.mesh)
        versions = "".join(
            "<tr>" + "".join(f"<td><b>{e(c)} (suggested)</b></td>" if k == 0 and v.name == r.chosen
                             else f"<td>{e(c)}</td>" for k, c in enumerate(_cells(v))) + "</tr>"
            for v in r.versions)
        costs = "".join(
            f"<tr><td>{e(v.name)}</td><td>{e(format_seconds(v.model.compute_seconds))}</td>"
            f"<td>{e(format_seconds(v.model.reduction_seconds))}</td><td>{e(format_seconds(v.model.reshard_seconds))}"
            f"</td><td>{e(format_seconds(v.model.seconds))}</td></tr>" for v in r.versions if v.model)
        figs = "".join(
            f'<figure><figcaption><b>{e(a.path)}</b> {e(shape_text(a.dtype, a.shape))}<br>written '
            f'{e(pspec_text(a.current))} &rarr; <b>{e(pspec_text(a.suggested))}</b> '
            f'{e(format_bytes(a.suggested_per_device_bytes))}/device'
            f'{" (pinned: " + e(a.pinned) + ")" if a.pinned else ""}'
            f'</figcaption>{device_grid(SimpleNamespace(sharding=a.suggested, shape=a.shape), mesh)}</figure>'
            for a in sorted(r.arguments, key=lambda a: (-_size(a), a.index))[:24])
        plans = ""
        if len(r.solver.plans) > 1:
            plans = ("<h3>The solver's plans, checked against propagation and compiled</h3><table><thead><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in _PLAN_HEAD) + "</tr></thead><tbody>"
                     + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in _plan_rows(r))
                     + "</tbody></table>")
        text = ""
        if r.in_shardings_text:
            text = (f'<pre class="fixtext">jax.jit(step, {e(r.in_shardings_text)}'
                    f'{", " + e(r.out_shardings_text) if r.out_shardings_text else ""})</pre>')
        elif r.text_problem:
            text = f'<p class="muted">no Python text: {e(r.text_problem)}</p>'
        body += (
            f'<section class="target" data-target="{e(r.name)}"><h2>{e(r.name)}</h2><p><b>{e(r.verdict)}</b></p>'
            f"<p>{e(_solver_line(r, plans_inline=False))}</p>{text}<h3>Compiled versions</h3><table><thead><tr>"
            + "".join(f"<th>{e(h)}</th>" for h in _HEAD) + f"</tr></thead><tbody>{versions}</tbody></table>"
            f"{plans}<h3>Cost model breakdown</h3><table><thead><tr><th>version</th><th>compute</th><th>reductions</th>"
            f"<th>resharding</th><th>total</th></tr></thead><tbody>{costs}</tbody></table>"
            f"<h3>Suggested argument shardings</h3><p class=\"muted\">Each block of an array (dims 0 and 1) with the "
            f"devices that hold it, on the {e(r.chosen)} shardings.</p><div class=\"grids\">{figs}</div>"
            + "".join(f'<p class="muted">note: {e(n)}</p>' for n in r.notes) + "</section>"
        )
    return _page("jax-shard-lint suggest", f"<main>{body}</main>")


def _size(a) -> int:
    n = 1
    for d in a.shape:
        n *= d
    return n
