"""``suggest`` as one HTML page, each argument's suggested sharding drawn as a
device grid."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.suggest import SuggestRun
from ..common.device_grid import device_grid
from ..common.html_page import e, page, run_header
from ..common.html_table import markup, table, target_section
from ..common.tensor_text import shape_text
from .summary import (
    PLAN_HEAD,
    VERSION_HEAD,
    jit_code,
    logical_rule_lines,
    model_note,
    placement_jit,
    placement_why,
    plan_rows,
    solver_line,
    version_cells,
)


def render_suggest_html(run: SuggestRun) -> str:
    body = run_header(run, "suggest")
    for r in run.targets:
        mesh = dict(r.mesh)
        versions = table(VERSION_HEAD, (
            [markup(f"<b>{e(c)} (suggested)</b>") if k == 0 and v.name == r.chosen else c
             for k, c in enumerate(version_cells(v))] for v in r.versions))
        costs = table(("version", "compute", "reductions", "resharding", "total"), (
            (v.name, format_seconds(v.model.compute_seconds), format_seconds(v.model.reduction_seconds),
             format_seconds(v.model.reshard_seconds), format_seconds(v.model.seconds))
            for v in r.versions if v.model))
        figs = "".join(
            f'<figure><figcaption><b>{e(a.path)}</b> {e(shape_text(a.dtype, a.shape))}<br>written '
            f'{e(pspec_text(a.current))} &rarr; <b>{e(pspec_text(a.suggested))}</b> '
            f'{e(format_bytes(a.suggested_per_device_bytes))}/device'
            f'{" (pinned: " + e(a.pinned) + ")" if a.pinned else ""}'
            f'</figcaption>{device_grid(a.suggested, a.shape, mesh)}</figure>'
            for a in sorted(r.arguments, key=lambda a: (-_size(a), a.index))[:24])
        plans = ""
        if len(r.solver.plans) > 1:
            plans = ("<h3>The solver's plans, checked against propagation and compiled</h3>"
                     + table(PLAN_HEAD, plan_rows(r)))
        text = ""
        if r.placement_text:
            text = (f'<p>{e(placement_why(r))}</p>'
                    f'<pre class="fixtext">{e(r.placement_text)}'
                    f'{chr(10) + e(placement_jit(r) or "") if placement_jit(r) else ""}'
                    '</pre>')
        elif jit_code(r):
            text = f'<pre class="fixtext">{e(jit_code(r) or "")}</pre>'

        elif r.text_problem:
            text = f'<p class="muted">no Python text: {e(r.text_problem)}</p>'
        if r.logical_rules is not None:
            text += ("".join(f"<p>{e(line)}</p>" for line in logical_rule_lines(r))
                     + f'<pre class="fixtext">{e(r.logical_rules.rules_text)}</pre>')
        body += target_section(r.name, (
            f"<p><b>{e(r.verdict)}</b></p><p>{e(solver_line(r, plans_inline=False))}</p>{text}"
            f"<h3>Compiled versions</h3>{versions}"
            + (f'<p class="muted">{e(model_note(r))}</p>' if model_note(r) else "")
            + f"{plans}<h3>Cost model breakdown</h3>{costs}"
            f"<h3>Suggested argument shardings</h3><p class=\"muted\">Each block of an array (dims 0 and 1) with the "
            f"devices that hold it, on the {e(r.chosen)} shardings.</p><div class=\"grids\">{figs}</div>"
            + "".join(f'<p class="muted">note: {e(n)}</p>' for n in r.notes)))
    return page("jax-shard-lint suggest", f"<main>{body}</main>")


def _size(a) -> int:
    n = 1
    for d in a.shape:
        n *= d
    return n
