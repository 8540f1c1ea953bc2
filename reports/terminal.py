"""The terminal report, with rich."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..passes.byte_sizes import format_bytes
from ..passes.models import Finding, LintReport, Severity, TargetReport
from ..passes.sharding_text import pspec_text

SEVERITY_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
MAX_ROWS = 15


def short_op_name(op: str) -> str:
    """``jit(step)/jvp()/while/body/x/dot_general`` -> ``.../x/dot_general``: the tail names the op."""
    parts = op.split("/")
    if len(parts) > 1 and parts[0].startswith("jit("):
        parts = parts[1:]
    text = "/".join(parts)
    return text if len(text) <= 32 else ".../" + "/".join(parts[-2:])[-28:]


def shape_text(dtype: str | None, shape: list[int] | None) -> str:
    return f"{dtype or ''}[{','.join(map(str, shape or []))}]"


def _src(f) -> str:
    return str(f) if f is not None else "-"


def _summary(t: TargetReport) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    mesh = " x ".join(f"{k}={v}" for k, v in t.mesh.items()) or "(no mesh)"
    grid.add_row("mesh", f"{mesh}  ({t.num_devices} devices)")
    if t.call_site is not None:
        again = f"; compiled {t.compilations} times (recompilation)" if t.compilations > 1 else ""
        grid.add_row("call site", f"{t.call_site}{again}")
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
    total = sum(c.bytes * c.count for c in t.collectives)
    grid.add_row("collectives", f"{len(t.collectives)} ops, {format_bytes(total)} per step per device")
    if t.axis_scope:
        scopes = ", ".join(f"{axis} {scope}" for axis, scope in t.axis_scope.items())
        grid.add_row("hosts", f"{scopes}; {format_bytes(t.cross_host_bytes)} per step crosses hosts")
    counts = {s: sum(1 for f in t.findings if f.severity == s) for s in Severity}
    found = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "none"
    if t.suppressed:
        found += f" ({t.suppressed} suppressed)"
    grid.add_row("findings", found)
    return grid


def _collectives(t: TargetReport) -> Table | None:
    if not t.collectives:
        return None
    table = Table(title="Collectives (by bytes x count)", title_justify="left", expand=False)
    # The op name is in the JSON and HTML reports; the terminal keeps the source line.
    for col, kw in (("kind", {"no_wrap": True}), ("bytes", {"justify": "right", "no_wrap": True}),
                    ("count", {"justify": "right", "no_wrap": True}), ("axes", {"min_width": 6}),
                    ("shape", {"no_wrap": True}), ("source", {"no_wrap": True})):
        table.add_column(col, **kw)
    for c in t.collectives[:MAX_ROWS]:
        count = f"{c.count}{'+' if c.count_is_lower_bound else ''}"
        table.add_row(
            c.kind + (" (async)" if c.is_async else "") + (" x-host" if c.cross_host else ""),
            format_bytes(c.bytes), count,
            ",".join(c.mesh_axes), shape_text(c.dtype, c.shape), _src(c.source),
        )
    if len(t.collectives) > MAX_ROWS:
        table.caption = f"{len(t.collectives) - MAX_ROWS} more in --format json"
    return table


def _live(t: TargetReport) -> Table | None:
    if not t.memory or not t.memory.live_at_peak:
        return None
    table = Table(title="Live at the peak", title_justify="left")
    for col, kw in (("bytes", {"justify": "right", "no_wrap": True}), ("shape", {"no_wrap": True}),
                    ("source", {"no_wrap": True}), ("produced by", {"overflow": "ellipsis", "no_wrap": True, "max_width": 40})):
        table.add_column(col, **kw)
    for b in t.memory.live_at_peak[:10]:
        shape = shape_text(b.dtype, b.shape) if b.shape is not None else "-"
        table.add_row(format_bytes(b.bytes), shape, _src(b.source), short_op_name(b.op_name or b.name))
    return table


def _io(t: TargetReport) -> Table:
    table = Table(title="Inputs and outputs", title_justify="left")
    for col in ("", "path", "shape", "sharding", "per device", "donated"):
        table.add_column(col)
    for kind, items in (("in", t.inputs), ("out", t.outputs)):
        for x in items[:MAX_ROWS]:
            table.add_row(kind, x.path, shape_text(x.dtype, x.shape), pspec_text(x.sharding),
                          format_bytes(x.per_device_bytes), "yes" if x.donated else "")
    return table


def render_finding(f: Finding) -> Text:
    line = Text()
    line.append(f"{f.rule} ", style=SEVERITY_STYLE[f.severity])
    line.append(f"[{f.severity.value}] ", style=SEVERITY_STYLE[f.severity])
    line.append(f"{_src(f.source)}: ", style="bold")
    line.append(f.message)
    if f.fix:
        line.append("\n    fix: ", style="green")
        line.append(f.fix)
    for why in f.provenance:
        line.append("\n    why: ", style="cyan")
        line.append(why)
    return line


def _findings(findings: list[Finding]) -> Group | None:
    if not findings:
        return None
    return Group(Text("Findings", style="bold underline"), *[render_finding(f) for f in findings])


def render_terminal(report: LintReport, console: Console) -> None:
    from rich.rule import Rule

    if report.run is not None:
        r = report.run
        status = "exited cleanly" if r.exit_code == 0 else f"exited with code {r.exit_code}: {r.error or ''}"
        console.print(Text(f"{report.script}: {status}; {r.programs_compiled} programs compiled, "
                           f"{r.programs_reported} reported, {len(r.skipped)} left out",
                           style="yellow" if r.exit_code else "green"))
    for t in report.targets:
        fix = None
        if t.suggested_out_shardings:
            fix = Text.assemble(("Suggested out_shardings for the state outputs (SL201):\n", "bold green"),
                                f"jax.jit(..., {t.suggested_out_shardings})")
        warn = Text("\n".join(f"warning: {w}" for w in t.warnings), style="yellow") if t.warnings else None
        parts = [x for x in (_summary(t), warn, _collectives(t), _live(t), _io(t), _findings(t.findings), fix)
                 if x is not None]
        console.print(Rule(f"[bold]{t.name}[/bold]", align="left"))
        console.print(Group(*parts))
    if report.findings:
        console.print(_findings(report.findings))
    worst = report.worst_severity()
    n = len(report.all_findings())
    summary = f"{len(report.targets)} target(s), {n} finding(s)"
    console.print(Text(summary, style=SEVERITY_STYLE.get(worst, "green") if worst else "green"))
