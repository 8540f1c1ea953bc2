"""The findings report (lint, run, check) in the terminal, with rich."""

from __future__ import annotations

from collections import Counter

from rich.console import Console, Group
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ...passes.common.axes import axes_text
from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.process_runs import MultiProcessReport
from ...passes.models.report import (
    Finding,
    LintReport,
    Severity,
    TargetReport,
    where_text,
)
from ..common.collective_totals import assumed, count_text, in_unknown_loops, total_text
from ..common.repeated_fixes import printed_fixes
from ..common.tensor_text import (
    collective_lines,
    collective_op_text,
    collective_shape_text,
    live_buffer_source,
    per_member_note,
    per_member_text,
    produced_by_text,
    shape_text,
)
from ..common.terminal_layout import Column, fitted_table, wrap_words
from ..common.terminal_safe import as_written, code_text, safe_text, shown, terminal_safe
from ..common.time_text import step_time_basis, step_time_line
from .none_found import none_found
from .process_runs_terminal import process_runs_view

SEVERITY_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}


MAX_ROWS = 15


def _src(f) -> str:
    return str(f) if f is not None else "-"


def _at_call_site(t: TargetReport, script_findings: list[Finding]) -> list[Finding]:
    """The script's source findings about this target's jit call (SL403 on the call that compiled it)."""
    at = t.call_site
    return [f for f in script_findings if at is not None and f.source is not None
            and (f.source.file, f.source.line) == (at.file, at.line)]


def _summary(t: TargetReport, script_findings: list[Finding] | None = None) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    mesh = " x ".join(f"{k}={v}" for k, v in t.mesh.items()) or "(no mesh)"
    grid.add_row("mesh", f"{mesh}  ({t.num_devices} devices)")
    if t.call_site is not None:
        again = f"; compiled {t.compilations} times (recompilation)" if t.compilations > 1 else ""
        grid.add_row("call site", shown(f"{t.call_site}{again}"))
    grid.add_row("platform", t.platform)
    m = t.memory
    if m is not None:
        peak = Text(format_bytes(m.peak_bytes))
        if m.budget_bytes is not None:
            pct = 100 * m.peak_bytes / m.budget_bytes if m.budget_bytes else float("inf")
            style = "red" if m.peak_bytes > m.budget_bytes else ("yellow" if pct > 90 else "green")
            peak.append(f" of {format_bytes(m.budget_bytes)} ({pct:.0f}%)", style=style)
        grid.add_row("peak / device", peak)
        grid.add_row(
            "  parts",
            f"temp {format_bytes(m.temp_bytes)} + arguments {format_bytes(m.argument_bytes)} + "
            f"outputs {format_bytes(m.output_bytes)} - aliased {format_bytes(m.alias_bytes)}",
        )
    if t.time is not None:
        # A CPU estimate is nominal: said before the seconds, which a newcomer reads first.
        caveat = "nominal CPU figure: " if t.time.nominal else ""
        # Loops whose trip count XLA does not know ran once in the estimate, or as --loop-trips says.
        bound = "at least " if in_unknown_loops(t.collectives) or t.time.compute_counted_once else ""
        hinted = " (loops as --loop-trips counts them)" if assumed(t.collectives) else ""
        grid.add_row("step time", Text(f"{caveat}{bound}~{step_time_line(t.time)}{hinted}"))
        grid.add_row("  basis", Text(step_time_basis(t.time), style="dim"))
    grid.add_row("collectives", total_text(t.collectives))
    by_intent: dict[str, int] = {}
    for c in t.collectives:
        if c.intent:
            by_intent[c.intent] = by_intent.get(c.intent, 0) + c.bytes * c.count
    if by_intent:
        grid.add_row("  by intent", ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(
            by_intent.items(), key=lambda kv: (-kv[1], kv[0]))))
    if t.axis_scope:
        scopes = ", ".join(f"{axis} {scope}" for axis, scope in t.axis_scope.items())
        grid.add_row("hosts", f"{scopes}; {format_bytes(t.cross_host_bytes)} per step crosses hosts")
    # run's source findings are the script's, listed below the targets: one about this target's call is
    # counted here too, so the summary and the footer's count agree (newcomer10: "findings none", "1 finding").
    from_source = _at_call_site(t, script_findings or [])
    counts = {s: sum(1 for f in [*t.findings, *from_source] if f.severity == s) for s in Severity}
    found = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or none_found(t)
    if from_source:
        found += f" ({', '.join(sorted({f.rule for f in from_source}))} from the script's source, below)"
    # The script's other source findings are listed below the targets, not in any: the header says so, not
    # "none" above a warning (newbie19b F6: SL403 on the loop that feeds the step, "findings none").
    if elsewhere := [f for f in script_findings or [] if f not in from_source]:
        tally = ", ".join(f"{n} {s.value}" for s in Severity
                          if (n := sum(1 for f in elsewhere if f.severity == s)))
        found += f"; the script's source: {tally} ({', '.join(sorted({f.rule for f in elsewhere}))}), below"
    if t.suppressed:
        found += f" ({t.suppressed} suppressed)"
    grid.add_row("findings", found)
    return grid


def _collectives(t: TargetReport, width: int) -> Table | None:
    if not t.collectives:
        return None
    rows = t.collectives[:MAX_ROWS]
    sources = [collective_lines(c) + (f" from {_src(c.called_from)}" if c.called_from else "") for c in rows]
    columns = [
        # A split collective's pieces are in the JSON and HTML reports: here they would wrap the kind.
        Column("kind", [c.kind + (" (async)" if c.is_async else "") + (" x-host" if c.cross_host else "")
                        for c in rows],
               fold=True),
        Column("bytes", [format_bytes(c.bytes) for c in rows], justify="right"),
        Column("count", [count_text(c) for c in rows], justify="right"),
        Column("time", [format_seconds(c.seconds) for c in rows], justify="right"),
        Column("axes", [axes_text(c.mesh_axes, t.mesh) for c in rows], fold=True),
        # A combined collective lists its parts' lines (their shapes are in the JSON and HTML reports).
        Column("source", sources, path=True),
        Column("intent", [c.intent or "-" for c in rows], essential=False),
        Column("shape", [collective_shape_text(c) for c in rows], essential=False),
        Column("via", [_src(c.via) for c in rows], essential=False, path=True),
    ]
    if all(c.via is None for c in rows):
        columns.pop()
    looks = [(c.kind, c.is_async, c.bytes, c.count, tuple(c.mesh_axes), line) for c, line in zip(rows, sources)]
    if len(set(looks)) < len(looks):
        # Rows that read the same (every layer of a model runs through one call) are told apart by
        # the module and op XLA names them by: wrapped, not shortened (their tails and heads both differ);
        # below 120 columns kept where most rows are at one line (then the source column tells them
        # apart no more: a ViT's 47 rows were at its model call but one), else left out where it would
        # take the source column's room.
        at_one_line = max(Counter(sources).values())
        columns.insert(6, Column("op", [_op(c) for c in rows], essential=width >= 120 or 2 * at_one_line > len(rows),
                                 fold=True))
    timed = any(c.seconds is not None for c in rows)
    if not timed:
        columns = [c for c in columns if c.header != "time"]
    caption = f"{len(t.collectives) - MAX_ROWS} more in --format json" if len(t.collectives) > MAX_ROWS else None
    title = "Collectives (by estimated time per step)" if timed else "Collectives (by bytes x count)"
    return fitted_table(title, columns, width, caption)


def _op(c) -> str:
    # collective_op_text cuts XLA's op name at its '/', as short_op_name does: on the name as written.
    return safe_text(collective_op_text(c.model_copy(update={"op_name": as_written(c.op_name)}) if c.op_name else c))


def _produced_by(b) -> str:
    # short_op_name cuts XLA's op name at its '/': on the name as written, not inside its markup escape ('\\[/bold]').
    written = b.model_copy(update={"op_name": as_written(b.op_name)}) if b.op_name else b
    return safe_text(produced_by_text(written))


def _live(t: TargetReport, width: int) -> Table | None:
    if not t.memory or not t.memory.live_at_peak:
        return None
    rows = t.memory.live_at_peak[:10]
    columns = [
        Column("bytes", [format_bytes(b.bytes) for b in rows], justify="right"),
        Column("shape", [shape_text(b.dtype, b.shape) if b.shape is not None else "-" for b in rows]),
        Column("source", [live_buffer_source(b, with_via=False) for b in rows], path=True),
        Column("produced by", [_produced_by(b) for b in rows], essential=False),
        Column("via", [_src(b.via) for b in rows], essential=False, path=True),
    ]
    if all(b.via is None for b in rows):
        columns.pop()
    if any(b.per_member_copy is not None for b in rows):
        # terminal_safe escaped the parameters' paths the text is made of already.
        columns.insert(2, Column("what it is", [per_member_text(b) for b in rows], fold=True))
    note = per_member_note(t.memory.live_at_peak)
    return fitted_table("Live at the peak", columns, width, safe_text(note) if note else None)


def _io(t: TargetReport, width: int) -> Table:
    items = [("in", x) for x in t.inputs[:MAX_ROWS]] + [("out", x) for x in t.outputs[:MAX_ROWS]]
    columns = [
        Column("", [k for k, _ in items]),
        Column("path", [x.path for _, x in items], fold=True),
        Column("shape", [shape_text(x.dtype, x.shape) for _, x in items]),
        Column("sharding", [pspec_text(x.sharding) for _, x in items], fold=True),
        Column("per device", [format_bytes(x.per_device_bytes) for _, x in items], justify="right"),
    ]
    if any(x.donated for _, x in items):
        columns.append(Column("donated", ["yes" if x.donated else "" for _, x in items], essential=False))
    more = len(t.inputs) + len(t.outputs) - len(items)
    return fitted_table("Inputs and outputs", columns, width, f"{more} more in --format json" if more > 0 else None)


_MAX_OPS = 6


def render_finding(f: Finding, width: int | None = None, fix: str | None = None) -> Group:
    """The finding's head line (rule, where, how many), then its parts under it, each wrapped with a
    hanging indent so a long message or fix reads as one block. With the console's ``width``, the
    parts break only between words and pytree keys (a path longer than a line breaks before a
    ``['key']``, not inside ``'kernel'``); rich folds only a piece longer than a whole line. ``fix``: the fix as
    printed, where another finding printed this one's in full (``repeated_fixes.printed_fixes``)."""
    fix = fix or f.fix
    # The body's text starts after its 4-column indent, its widest label and a one-column gap.
    labels = ["param:" if f.parameter else "", "fix:" if f.fix else "", "why:" if f.provenance else "",
              "ops:" if len(f.ops) > 1 else ""]
    text_width = (width - 4 - max(len(label) for label in labels) - 1) if width is not None else 0

    def broken(text: str) -> str:
        return wrap_words(text, text_width) if text_width >= 20 else text

    where = shown(where_text(f.source, f.via), style="bold")
    if f.count > 1:
        where.append(f"  {f.count}x" + (f", {format_bytes(f.bytes)} per step in all" if f.bytes else ""),
                     style="magenta")
    # A long location wraps under itself, not back at column 0.
    head = Table.grid(padding=(0, 1))
    head.add_column(no_wrap=True)
    head.add_column(ratio=1, overflow="fold")
    head.add_row(Text(f"{f.rule} [{f.severity.value}]", style=SEVERITY_STYLE[f.severity]), where)
    body = Table.grid(padding=(0, 1))
    body.add_column(no_wrap=True)
    body.add_column(ratio=1, overflow="fold")
    body.add_row("", broken(f.message))
    if f.parameter:
        spec = pspec_text(f.parameter_sharding) if f.parameter_sharding is not None else ""
        # A finding whose fix keeps the parameter's own layout (SL205 pins the output to it) shows no arrow.
        to = (f" -> {pspec_text(f.suggested_sharding)}" if f.suggested_sharding is not None
              and pspec_text(f.suggested_sharding) != spec else "")
        body.add_row(Text("param:", style="blue"), broken(f"{f.parameter} {spec}{to}".rstrip()))
    if fix:
        body.add_row(Text("fix:", style="green"), broken(fix))
    for why in f.provenance:
        body.add_row(Text("why:", style="cyan"), broken(why))
    if len(f.ops) > 1:
        ops = ", ".join(f.ops[:_MAX_OPS]) + (f" and {len(f.ops) - _MAX_OPS} more" if len(f.ops) > _MAX_OPS else "")
        body.add_row(Text("ops:", style="dim"), shown(ops, style="dim"))
    return Group(head, Padding(body, (0, 0, 1, 4)))


def _findings(findings: list[Finding], width: int | None = None) -> Group | None:
    if not findings:
        return None
    title = Padding(Text("Findings", style="bold underline"), (1, 0, 0, 0))
    return Group(title, *[render_finding(f, width, fix) for f, fix in zip(findings, printed_fixes(findings))])


def _warnings(warnings: list[str]) -> Table | None:
    """The target's warnings, each wrapped under its own text (not back at column 0)."""
    if not warnings:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for w in warnings:
        grid.add_row(Text("warning:", style="yellow"), shown(w, style="yellow"))
    return grid


def render_terminal(report: LintReport, console: Console) -> None:
    raw = report  # the Python to paste is printed as Text, not markup: escaping would put "\\[" into it
    report = terminal_safe(report)

    if report.run is not None:
        r = report.run
        status = "exited cleanly" if r.exit_code == 0 else f"exited with code {r.exit_code}: {r.error or ''}"
        console.print(shown(f"{report.script}: {status}; {r.programs_compiled} programs compiled, "
                           f"{r.programs_reported} reported, {len(r.skipped)} left out",
                           style="yellow" if r.exit_code else "green"))
    for note in report.source_notes:
        console.print(shown(f"source: {note}", style="yellow" if "not analysed" in note else "dim"))
    for t, code in zip(report.targets, raw.targets):
        fix = None
        if code.suggested_out_shardings:
            fix = Text.assemble(("Suggested out_shardings for the state outputs (SL201):\n", "bold green"),
                                code_text(f"jax.jit(..., {code.suggested_out_shardings})"))
        warn = _warnings(list(t.warnings))
        width = console.width
        # The verdict and the findings first; then the evidence they come from.
        parts = [x for x in (_summary(t, list(report.findings)), warn, _findings(t.findings, width), fix,
                             _collectives(t, width), _live(t, width), _io(t, width))
                 if x is not None]
        console.print(Rule(f"[bold]{t.name}[/bold]", align="left"))
        console.print(Group(*parts))
    if isinstance(report, MultiProcessReport):
        console.print(process_runs_view(report))
    if report.findings:
        console.print(_findings(report.findings, console.width))
    worst = report.worst_severity()
    n = len(report.all_findings())
    summary = f"{len(report.targets)} target(s), {n} finding(s)"
    console.print(Text(summary, style=SEVERITY_STYLE.get(worst, "green") if worst else "green"))
