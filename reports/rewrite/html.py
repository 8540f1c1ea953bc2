"""``rewrite`` as one HTML page: outputs pinned, before and after, the collectives
that changed, the validation."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.rewrite import RewriteRun
from ..common.html_page import e, page, run_header
from ..common.tensor_text import shape_text


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def render_rewrite_html(run: RewriteRun) -> str:
    body = run_header(run, "rewrite")
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
            f"as declared <b>{'yes' if v.shardings_match else 'NO'}</b>, median step {_ms(v.time_before_s)} "
            f"&rarr; {_ms(v.time_after_s)}.</p>")
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
    return page("jax-shard-lint rewrite", f"<main>{body}</main>")
