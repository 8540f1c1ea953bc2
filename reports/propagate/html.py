"""HTML for the propagate and rewrite runs, in the same self-contained page."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.report import PropagateRun
from ...passes.models.rewrite import RewriteRun
from ..common.agreement_text import agreement_text
from ..findings.html import _page, e
from ..findings.terminal import shape_text


def _header(run, title: str) -> str:
    return (f"<header><h1>jax-shard-lint {e(title)}</h1><p>{e(run.script or '')} &middot; jax {e(run.jax_version)} "
            f"&middot; jax-shard-lint {e(run.tool_version)}</p></header>")


def render_propagation_html(run: PropagateRun) -> str:
    body = _header(run, "propagate")
    for t in run.targets:
        values = "".join(
            f"<tr><td>{e(v.name)}</td><td>{e(shape_text(v.dtype, v.shape))}</td><td>{e(pspec_text(v.sharding))}</td>"
            f'<td data-v="{v.per_device_bytes}">{e(format_bytes(v.per_device_bytes))}</td>'
            f"<td>{e(v.source) if v.source else '-'}</td><td>{e(v.seed or '-')}</td>"
            "<td><ol>" + "".join(
                f"<li>{e(p.value)} {e(pspec_text(p.sharding))}{' via ' + e(p.op) if p.op else ''}"
                f"{' at ' + e(p.source) if p.source else ''}</li>" for p in v.provenance) + "</ol></td></tr>"
            for v in t.values if any(v.sharding)
        )
        predicted = "".join(
            f"<tr><td>{e(p.kind)}</td><td data-v=\"{p.bytes}\">{e(format_bytes(p.bytes))}</td>"
            f"<td>{e(', '.join(p.mesh_axes))}</td><td>{e(p.op)}</td><td>{e(p.source) if p.source else '-'}</td>"
            f"<td>{ {True: 'yes', False: 'no', None: '-'}[p.matched_compiled] }</td><td>{e(p.reason)}</td></tr>"
            for p in t.predicted
        )
        a = t.agreement_with_shardy
        agreement = "" if a is None else (
            f"<p data-agreement=\"{'' if a.fraction is None else a.fraction}\">{e(agreement_text(a).capitalize())}."
            "</p>" + "".join(
                f"<p class=\"muted\">{e(d.value)} ({e(d.source) if d.source else '-'}): ours {e(pspec_text(d.ours))}, "
                f"Shardy {e(pspec_text(d.shardy))}</p>" for d in a.disagreements[:20]))
        body += (
            f'<section class="target" data-target="{e(t.name)}"><h2>{e(t.name)}</h2>{agreement}'
            + (f'<p class="muted">Not compiled: {e(t.not_compiled)}.</p>' if t.not_compiled else "") +
            '<h3>Sharded values</h3><table class="sortable"><thead><tr><th>value</th><th>shape</th><th>sharding</th>'
            f"<th>per device</th><th>source</th><th>from</th><th>provenance</th></tr></thead><tbody>{values}</tbody>"
            '</table><h3>Predicted communication</h3><table class="sortable"><thead><tr><th>kind</th><th>bytes</th>'
            "<th>axes</th><th>op</th><th>source</th><th>compiled</th><th>why</th></tr></thead>"
            f"<tbody>{predicted}</tbody></table></section>"
        )
    return _page("jax-shard-lint propagate", f"<main>{body}</main>")


def render_rewrite_html(run: RewriteRun) -> str:
    body = _header(run, "rewrite")
    for r in run.targets:
        rows = "".join(
            f"<tr><td>{label}</td><td>{e(format_bytes(getattr(r.before, attr)))}</td>"
            f"<td>{e(format_bytes(getattr(r.after, attr)))}</td></tr>"
            for label, attr in (("peak / device", "peak_bytes"), ("temp", "temp_bytes"),
                                ("arguments", "argument_bytes"), ("outputs", "output_bytes"),
                                ("aliased", "alias_bytes"), ("collectives / step", "collective_bytes"))
        )
        if r.before.time is not None and r.after.time is not None:
            rows += (f"<tr><td>est. step time ({e(r.after.time.device)})</td>"
                     f"<td>{e(format_seconds(r.before.time.seconds))}"
                     f"</td><td>{e(format_seconds(r.after.time.seconds))}</td></tr>")
        pinned = "".join(
            f"<tr><td>{e(a.path)}</td><td>{e(pspec_text(a.before))}</td><td>{e(pspec_text(a.after))}</td>"
            f"<td>{e(a.why)}</td></tr>" for a in r.out_shardings
        )
        changes = "".join(
            f"<tr><td>{e(c.change)}</td><td>{e(c.kind)}</td><td>{e(', '.join(c.mesh_axes))}</td>"
            f"<td>{e(shape_text(c.dtype, c.shape))}</td><td>{e(format_bytes(c.bytes_before))}</td>"
            f"<td>{e(format_bytes(c.bytes_after))}</td><td>{e(c.source) if c.source else '-'}</td></tr>"
            for c in r.collective_changes
        )
        v = r.validation
        validation = "" if v is None else (
            f"<p>Validation on {e(v.backend)}: skipped, {e(v.reason)}</p>" if not v.ran else
            f"<p>Validation on {e(v.backend)}: outputs match <b>{'yes' if v.outputs_match else 'NO'}</b>, shardings "
            f"as declared <b>{'yes' if v.shardings_match else 'NO'}</b>, median step {v.time_before_s * 1000:.2f} ms "
            f"&rarr; {v.time_after_s * 1000:.2f} ms.</p>")
        body += (
            f'<section class="target" data-target="{e(r.name)}"><h2>{e(r.name)}</h2><p><b>{e(r.verdict)}</b></p>'
            + "".join(f'<p class="warning">remaining: {e(x)}</p>' for x in r.remaining)
            + (f'<pre class="fixtext">jax.jit(..., {e(r.python_fix)})</pre>' if r.python_fix else "")
            + f"<h3>Outputs pinned</h3><table><thead><tr><th>output</th><th>before</th><th>pinned to</th><th>why</th>"
            f"</tr></thead><tbody>{pinned}</tbody></table><h3>Before and after</h3><table><thead><tr><th></th>"
            f"<th>before</th><th>after</th></tr></thead><tbody>{rows}</tbody></table><h3>Collectives that changed</h3>"
            f'<table class="sortable"><thead><tr><th>change</th><th>kind</th><th>axes</th><th>shape</th><th>before</th>'
            f"<th>after</th><th>source</th></tr></thead><tbody>{changes}</tbody></table>{validation}</section>"
        )
    return _page("jax-shard-lint rewrite", f"<main>{body}</main>")
