"""One self-contained HTML file per report: inline CSS, JS and SVG, no network,
works opened from disk or as a CI artifact. Every string that comes from a
program or a path is escaped."""

from __future__ import annotations

from collections import defaultdict

from ...passes.common.axes import axes_text
from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.report import (
    LintReport,
    MemorySummary,
    TargetReport,
    TensorInfo,
    where_text,
)
from ..common.collective_totals import count_text, in_unknown_loops, step_bytes, total_text
from ..common.device_grid import device_grid
from ..common.html_page import e, page
from ..common.html_table import cell, markup, table, target_section
from ..common.tensor_text import (
    collective_op_text,
    collective_shape_text,
    live_buffer_source,
    other_part_lines,
    parts_text,
    per_member_note,
    per_member_text,
    produced_by_text,
    shape_text,
)
from ..common.time_text import step_time_basis, step_time_line
from .none_found import none_found

MAX_GRID_TENSORS = 12


def _card(label: str, value: str, extra: str = "", cls: str = "") -> str:
    return f'<div class="card {cls}"><div class="label">{e(label)}</div><div class="value">{value}</div>{extra}</div>'


def _summary(t: TargetReport) -> str:
    m = t.memory
    counts = defaultdict(int)
    for f in t.findings:
        counts[f.severity.value] += 1
    cards = [
        _card("mesh", e(" x ".join(f"{k}={v}" for k, v in t.mesh.items()) or "unknown"),
              f'<div class="sub">{t.num_devices} devices</div>'),
        _card("platform", e(t.platform)),
    ]
    if m is not None:
        bar = ""
        cls = ""
        if m.budget_bytes:
            pct = 100 * m.peak_bytes / m.budget_bytes
            cls = "bad" if pct > 100 else "warn" if pct > 90 else "ok"
            bar = (f'<div class="bar"><div class="fill {cls}" style="width:{min(pct, 100):.1f}%"></div></div>'
                   f'<div class="sub">{pct:.1f}% of {e(format_bytes(m.budget_bytes))}</div>')
        cards.append(_card("peak / device", f'<span data-peak-bytes="{m.peak_bytes}">{e(format_bytes(m.peak_bytes))}'
                                            "</span>", bar, cls))
    unknown = in_unknown_loops(t.collectives)
    # A loop whose trip count XLA does not know counts its collectives once: the total is a lower bound.
    total = ("at least " if unknown else "") + e(format_bytes(step_bytes(t.collectives)))
    cards.append(_card("collectives / step", total,
                       f'<div class="sub">{e(total_text(t.collectives))}</div>'))
    if t.time is not None:
        cards.append(_card("estimated step time",
                           f'<span data-seconds="{t.time.seconds}">'
                           + ("at least " if unknown or t.time.compute_counted_once else "")
                           + f'~{e(format_seconds(t.time.seconds))}</span>',
                           # A CPU estimate's caveat comes before its figures.
                           ('<div class="sub"><b>nominal CPU figure</b>, for comparing targets only</div>'
                              if t.time.nominal else "")
                           + f'<div class="sub">{e(step_time_line(t.time))}</div>'
                           # The basis is long: folded, so the cards stay one short row.
                           f'<details class="sub"><summary>basis</summary>{e(step_time_basis(t.time))}; '
                           f'sources: {e("; ".join(t.time.sources))}</details>'))
    anchor = f"findings-{e(t.name)}"
    cards.append(_card("findings", " ".join(
        f'<a class="sev {s}" href="#{anchor}">{n} {s}</a>' for s, n in sorted(counts.items())) or e(none_found(t)),
        f'<div class="sub">{t.suppressed} suppressed</div>' if t.suppressed else ""))
    return f'<div class="cards">{"".join(cards)}</div>'


def memory_plot(m: MemorySummary) -> str:
    """Bytes live over the entry's program order, with XLA's live-range peak step
    marked and the headline peak (memory_analysis) drawn as its own labelled line:
    the two are different accountings, and the plot says which is which."""
    points = m.timeline
    if not points:
        return '<p class="muted">No live-range data for this program.</p>'
    width, height, pad = 1000, 340, 44
    curve_max = max(p.bytes for p in points)
    top = max(curve_max, m.live_range_peak_bytes or 0, m.peak_bytes, 1)
    budget_visible = m.budget_bytes is not None and m.budget_bytes <= 1.5 * top
    if budget_visible:
        top = max(top, m.budget_bytes)
    top *= 1.08
    last = max(points[-1].step, 1)
    ticks = [(frac, format_bytes(int(frac * top / 1.08))) for frac in (0, 0.5, 1)]
    # Room on the left for the longest tick label (about 7 px a character at this size).
    left = max(pad, 14 + 7 * max(len(label) for _, label in ticks))

    def x(step):
        return left + (width - left - pad) * step / last

    def y(nbytes):
        return height - pad - (height - 2 * pad) * nbytes / top

    path = " ".join(f"{x(p.step):.1f},{y(p.bytes):.1f}" for p in points)
    parts = [f'<svg class="memplot" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="bytes live over program order" data-points="{len(points)}" '
             f'data-curve-max="{curve_max}" data-headline-peak="{m.peak_bytes}" data-top="{top:.1f}" '
             f'data-plot-top="{pad}" data-plot-bottom="{height - pad}">']
    for frac, label in ticks:
        yy = y(frac * top / 1.08)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - pad}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
                     f'<text class="tick ylabel" x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">{e(label)}</text>')
    parts.append(f'<polyline class="live" points="{path}"/>')
    yh = y(m.peak_bytes)
    parts.append(f'<line class="headline" x1="{left}" x2="{width - pad}" y1="{yh:.1f}" y2="{yh:.1f}"/>'
                 f'<text class="tick" x="{left + 4}" y="{yh - 4:.1f}">peak {e(format_bytes(m.peak_bytes))} '
                 "(temp + arguments + outputs - aliased)</text>")
    if budget_visible:
        yb = y(m.budget_bytes)
        parts.append(f'<line class="budget" x1="{left}" x2="{width - pad}" y1="{yb:.1f}" y2="{yb:.1f}"/>'
                     f'<text class="tick budget-label" x="{width - pad}" y="{yb - 4:.1f}" text-anchor="end">'
                     f'budget {e(format_bytes(m.budget_bytes))}</text>')
    # The dot is the curve's own highest point, labelled with its value: a dot at another figure
    # (XLA's heap-simulator peak) on this curve read as a contradiction of it.
    highest = max(points, key=lambda p: p.bytes)
    xc, yc = x(highest.step), y(highest.bytes)
    anchor = "end" if xc > width / 2 else "start"
    xt = xc - 8 if anchor == "end" else xc + 8
    parts.append(f'<circle class="peak-dot" cx="{xc:.1f}" cy="{yc:.1f}" r="4"/>'
                 f'<text class="tick curve-max" x="{xt:.1f}" y="{yc + 18:.1f}" text-anchor="{anchor}">'
                 f'highest point of the curve: {e(format_bytes(highest.bytes))} at step {highest.step}</text>')
    if m.peak_step is not None and m.live_range_peak_bytes is not None:
        xp = x(m.peak_step)
        anchor = "end" if xp > width / 2 else "start"
        xt = xp - 6 if anchor == "end" else xp + 6
        parts.append(f'<line class="peak" x1="{xp:.1f}" x2="{xp:.1f}" y1="{pad}" y2="{height - pad}"/>'
                     f'<text class="tick" x="{xt:.1f}" y="{height - pad - 6}" text-anchor="{anchor}">'
                     f"XLA's live-range peak, step {m.peak_step}: {e(format_bytes(m.live_range_peak_bytes))} "
                     "(its heap simulator's count)</text>")
    parts.append(f'<text class="tick" x="{(left + width - pad) / 2:.1f}" y="{height - 10}" text-anchor="middle">'
                 "program order (instruction of the entry computation)</text></svg>")
    note = ('<p class="muted">Three figures, three accountings. The curve is the bytes of the entry '
            "computation's buffers live at each instruction (XLA's live-range report, each live value's slice of "
            "the buffer assignment, shared slices counted once); its highest point is marked. The dotted vertical "
            "line is where XLA's live-range report puts its own peak, the heap simulator's count, which places "
            "only the buffers it simulates and so can read lower than the curve. The dashed horizontal line is "
            "the headline peak, memory_analysis(), which also counts what the curve cannot place in time "
            "(arguments and outputs held throughout, buffers of called computations).</p>")
    if not budget_visible and m.budget_bytes is not None:
        note += f'<p class="muted">Budget {e(format_bytes(m.budget_bytes))} is off the scale of this plot.</p>'
    return "".join(parts) + note


def _memory(t: TargetReport) -> str:
    m = t.memory
    if m is None:
        return ""
    copies = any(b.per_member_copy is not None for b in m.live_at_peak[:20])
    live = table(("bytes", "shape") + (("what it is",) if copies else ()) + ("source", "produced by"), (
        (cell(format_bytes(b.bytes), sort=b.bytes), shape_text(b.dtype, b.shape) if b.shape is not None else "-",
         *((per_member_text(b),) if copies else ()),
         live_buffer_source(b), cell(produced_by_text(b), cls="op", title=b.op_name or b.name))
        for b in m.live_at_peak[:20]), cls="sortable")
    if note := per_member_note(m.live_at_peak):
        live += f'<p class="muted">{e(note)}</p>'
    parts = (f"temp {format_bytes(m.temp_bytes)} + arguments {format_bytes(m.argument_bytes)} + outputs "
             f"{format_bytes(m.output_bytes)} - aliased {format_bytes(m.alias_bytes)}")
    return (
        f'<h3>Memory</h3><p>{e(parts)} ({e(m.platform)} figures)</p><div class="memory">'
        f'<div class="plot">{memory_plot(m)}</div>'
        f'<div class="live"><h4>Live at the peak</h4>{live}</div></div>'
    )


def _collectives(t: TargetReport) -> str:
    if not t.collectives:
        return "<h3>Collectives</h3><p class=\"muted\">None.</p>"
    rows = table(("kind", "bytes", "count", "per step", "est. time", "mesh axes", "intent", "shape", "source", "op"), (
        (markup(e(c.kind) + (" <span class=tag>async</span>" if c.is_async else "")
                + (" <span class=tag>x-host</span>" if c.cross_host else "")
                + (f' <span class=tag title="{e(", ".join(c.pieces))}">{1 + len(c.pieces)} pieces</span>'
                   if c.pieces else "")
                + (f' <span class=tag title="{e(parts_text(c))}">{len(c.parts)} parts</span>' if c.parts else "")),
         cell(format_bytes(c.bytes), sort=c.bytes), cell(count_text(c), sort=c.count),
         cell(format_bytes(c.bytes * c.count), sort=c.bytes * c.count),
         cell(format_seconds(c.seconds), sort=c.seconds or 0), axes_text(c.mesh_axes, t.mesh, ", "),
         c.intent or "-",
         collective_shape_text(c),
         markup(e(where_text(c.source, c.via))
                + (f"<br><span class=muted>{e(others)}</span>" if (others := other_part_lines(c, most=8)) else "")
                + (" <span class=muted>from " + e(str(c.called_from)) + "</span>" if c.called_from else "")),
         # The terminal's op text (a combined collective's op name joins every op it sums: 7,290 characters
         # for a ViT's gradient all-reduce); XLA's whole name is the cell's hover text.
         cell(collective_op_text(c), cls="op", title=c.op_name or c.hlo_name))
        for c in t.collectives), cls="sortable collectives")
    by_line: dict[str, list] = defaultdict(list)
    for c in t.collectives:
        by_line[str(c.source) if c.source else "(no source)"].append(c)
    per_line = table(("source", "ops", "per step", "kinds"), (
        (line, cell(len(cs), sort=len(cs)), cell(format_bytes(sum(c.bytes * c.count for c in cs)),
                                                  sort=sum(c.bytes * c.count for c in cs)),
         ", ".join(sorted({c.kind for c in cs})))
        for line, cs in sorted(by_line.items(), key=lambda kv: -sum(c.bytes * c.count for c in kv[1]))),
        cls="sortable")
    return (f'<h3>Collectives</h3><p class="muted">Click a column to sort.</p>{rows}'
            f"<h4>Per source line</h4>{per_line}")


def _io(t: TargetReport) -> str:
    def section(title: str, items: list[TensorInfo]) -> str:
        shown = sorted(items, key=lambda x: -x.bytes)[:MAX_GRID_TENSORS]
        figs = "".join(
            f'<figure><figcaption><b>{e(x.path)}</b> {e(shape_text(x.dtype, x.shape))} {e(pspec_text(x.sharding))} '
            f'{e(format_bytes(x.per_device_bytes))}/device{" donated" if x.donated else ""}</figcaption>'
            f"{device_grid(x.sharding, x.shape, t.mesh)}</figure>"
            for x in shown
        )
        more = f'<p class="muted">{len(items) - len(shown)} smaller not drawn.</p>' if len(items) > len(shown) else ""
        return f"<h4>{e(title)}</h4><div class=\"grids\">{figs}</div>{more}"

    return ("<h3>Inputs and outputs</h3><p class=\"muted\">Each block of an array with the devices that hold "
            "it: dim 0's blocks as rows, dim 1's as columns, one panel per block of each later split dim.</p>"
            + section("inputs", t.inputs) + section("outputs", t.outputs))


def _findings(findings, docs: dict, target: str | None = None) -> str:
    heading = f'<h3 id="findings-{e(target)}">Findings</h3>' if target is not None else "<h3>Findings</h3>"
    if not findings:
        return f'{heading}<p class="muted">None.</p>'

    items = []
    for f in findings:
        doc = docs.get(f.rule)
        why = "".join(f"<li>{e(line)}</li>" for line in f.provenance)
        count = (f' <span class="count">{f.count}x' + (f", {e(format_bytes(f.bytes))} per step in all" if f.bytes
                                                        else "") + "</span>") if f.count > 1 else ""
        param = ""
        if f.parameter:
            to = f" &rarr; <code>{e(pspec_text(f.suggested_sharding))}</code>" if f.suggested_sharding else ""
            spec = f" <code>{e(pspec_text(f.parameter_sharding))}</code>" if f.parameter_sharding is not None else ""
            param = f'<p class="param">parameter <code>{e(f.parameter)}</code>{spec}{to}</p>'
        ops = "".join(f"<li><code>{e(op)}</code></li>" for op in f.ops)
        items.append(
            f'<div class="finding {e(f.severity.value)}"><div><span class="sev {e(f.severity.value)}">'
            f"{e(f.severity.value)}</span> <b>{e(f.rule)}</b> {e(f.name)} <code>{e(where_text(f.source, f.via))}"
            f"</code>{count}</div><p>{e(f.message)}</p>{param}"
            + (f'<p class="fix">fix: <code>{e(f.fix)}</code></p>' if f.fix else "")
            + (f"<details><summary>{len(f.ops)} ops</summary><ul>{ops}</ul></details>" if len(f.ops) > 1 else "")
            + (f'<details><summary>why (propagation)</summary><ul>{why}</ul></details>' if why else "")
            + (f'<details><summary>rule {e(f.rule)}: {e(doc.summary)}</summary><pre>{e(doc.doc)}</pre></details>'
               if doc else "")
            + "</div>"
        )
    return heading + "".join(items)


def render_target(t: TargetReport, docs: dict) -> str:
    fix = (f'<h3>Suggested out_shardings</h3><pre class="fixtext">jax.jit(..., {e(t.suggested_out_shardings)})</pre>'
           if t.suggested_out_shardings else "")
    warnings = "".join(f'<p class="warning">{e(w)}</p>' for w in t.warnings)
    # The verdict and the findings first; then the evidence (memory, collectives, inputs and outputs).
    return target_section(t.name, f"{warnings}{_summary(t)}{_findings(t.findings, docs, t.name)}{fix}{_memory(t)}"
                                  f"{_collectives(t)}{_io(t)}")


def render_html(report: LintReport) -> str:
    docs = {d.code: d for d in report.rules}
    body = (f"<header><h1>jax-shard-lint</h1><p>{e(report.command)} {e(report.script or '')} &middot; "
            f"jax {e(report.jax_version)} &middot; jax-shard-lint {e(report.tool_version)}</p></header>")
    body += "".join(render_target(t, docs) for t in report.targets)
    if report.findings:
        body += target_section(None, _findings(report.findings, docs))
    return page(f"jax-shard-lint: {report.script or report.command}", f"<main>{body}</main>")
