"""The sweep as one HTML page: the ranking and a peak-memory against
estimated-time scatter (the Pareto front joined)."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.sweep import SweepRun
from ..common.html_page import e, page
from ..common.html_table import Row, cell, table, target_section
from .summary import (
    collectives_text,
    compile_time_text,
    compiled_on_text,
    execution_text,
    fit_text,
    headline,
    slowdown_text,
    slowest_collective_text,
)


def scatter(run: SweepRun) -> str:
    """Peak per device (x) against estimated step time (y), one dot per
    candidate; the Pareto front joined; the budget as a vertical line."""
    pts = [c for c in run.candidates if c.seconds is not None and c.peak_bytes is not None]
    peak = {id(c): c.peak_bytes or 0 for c in pts}  # never 0: pts have both figures
    seconds = {id(c): c.seconds or 0.0 for c in pts}
    if not pts:
        return '<p class="muted">No candidate has both a peak and an estimated time.</p>'
    width, height, pad, left = 860, 320, 48, 96
    max_x = max([peak[id(c)] for c in pts] + ([run.budget_bytes] if run.budget_bytes and run.budget_bytes <= 2 * max(
        peak[id(c)] for c in pts) else [])) * 1.1 or 1
    max_y = max(seconds[id(c)] for c in pts) * 1.15 or 1

    def x(v: float) -> float:
        return left + (width - left - pad) * v / max_x

    def y(v: float) -> float:
        return height - pad - (height - 2 * pad) * v / max_y

    parts = [f'<svg class="sweepplot" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="peak memory against estimated step time" data-points="{len(pts)}">']
    for frac in (0, 0.5, 1):
        yy, xx = y(frac * max_y / 1.15), x(frac * max_x / 1.1)
        parts.append(f'<line class="grid" x1="{left}" x2="{width - pad}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
                     f'<text class="tick ylabel" x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">'
                     f'{e(format_seconds(frac * max_y / 1.15))}</text>'
                     f'<text class="tick" x="{xx:.1f}" y="{height - pad + 16}" text-anchor="middle">'
                     f'{e(format_bytes(int(frac * max_x / 1.1)))}</text>')
    if run.budget_bytes and run.budget_bytes <= max_x:
        xb = x(run.budget_bytes)
        parts.append(f'<line class="budget" x1="{xb:.1f}" x2="{xb:.1f}" y1="{pad}" y2="{height - pad}"/>'
                     f'<text class="tick budget-label" x="{xb - 4:.1f}" y="{pad - 6}" text-anchor="end">'
                     f'budget {e(format_bytes(run.budget_bytes))}</text>')
    front = sorted((c for c in pts if c.pareto), key=lambda c: peak[id(c)])
    if len(front) > 1:
        path = " ".join(f"{x(peak[id(c)]):.1f},{y(seconds[id(c)]):.1f}" for c in front)
        parts.append(f'<polyline class="pareto" points="{path}"/>')
    # Points are labelled with their row number in the table below (labels as long
    # as a candidate's parameters would cover each other); hovering shows the whole.
    number = {id(c): k + 1 for k, c in enumerate(run.candidates)}
    for c in pts:
        cls = "best" if c.rank == 1 else "over" if c.fits is False else "pareto" if c.pareto else "other"
        cx, cy = x(peak[id(c)]), y(seconds[id(c)])
        parts.append(f'<circle class="cand {cls}" cx="{cx:.1f}" cy="{cy:.1f}" r="5" data-label="{e(c.label)}">'
                     f"<title>#{number[id(c)]} {e(c.label)}: {e(format_seconds(c.seconds))}, "
                     f"{e(format_bytes(c.peak_bytes))}</title></circle>"
                     f'<text class="tick pointlabel" x="{cx + 7:.1f}" y="{cy - 7:.1f}">#{number[id(c)]}</text>')
    parts.append(f'<text class="tick" x="{(left + width - pad) / 2:.1f}" y="{height - 8}" text-anchor="middle">'
                 "peak memory per device</text>"
                 f'<text class="tick" x="14" y="{height / 2:.1f}" transform="rotate(-90 14 {height / 2:.1f})" '
                 'text-anchor="middle">estimated step time</text></svg>')
    return "".join(parts)


def render_sweep_html(run: SweepRun) -> str:
    rows = (Row((f"#{k + 1}", c.rank or "-", c.label, cell(format_seconds(c.seconds), sort=c.seconds or 0),
                 slowdown_text(c),
                 cell(format_bytes(c.peak_bytes) if c.peak_bytes is not None else "-", sort=c.peak_bytes or 0),
                 fit_text(c), cell(collectives_text(c, c.collective_bytes), sort=c.collective_bytes),
                 cell(collectives_text(c, c.cross_host_bytes), sort=c.cross_host_bytes), "yes" if c.pareto else "",
                 slowest_collective_text(c), cell(compile_time_text(run, c), title=compiled_on_text(run, c))),
                "over" if c.fits is False else "failed" if c.error else "")
            for k, c in enumerate(run.candidates))
    basis = next((c.time for c in run.candidates if c.time is not None), None)
    note = (f'<p class="muted">Estimates: {e(basis.basis)}. Sources: {e("; ".join(basis.sources))}.</p>'
            if basis else "")
    body = (f"<header><h1>jax-shard-lint sweep</h1><p>{e(run.script or '')} &middot; {e(run.platform)} &middot; "
            f"jax {e(run.jax_version)} &middot; jax-shard-lint {e(run.tool_version)}</p></header>"
            + target_section(None, f"<p><b>{e(headline(run))}</b></p>{scatter(run)}{note}" + table(
                ("point", "rank", "candidate", "est. time", "vs best", "peak / device", "fits", "collectives / step",
                 "across hosts", "Pareto", "slowest collective", "compiled"), rows, cls="sortable sweep")
                + f'<p class="muted">{e(execution_text(run))}</p>'))
    return page(f"jax-shard-lint sweep: {run.script}", body)
