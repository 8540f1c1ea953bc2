"""``rewrite`` as one HTML page: outputs pinned, before and after, the collectives
that changed, the validation."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.rewrite import RewriteRun
from ..common.html_page import e, page, run_header
from ..common.html_table import table, target_section
from ..common.tensor_text import earlier_sharding_text, shape_text
from .validation_text import outputs_match_text


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def render_rewrite_html(run: RewriteRun) -> str:
    body = run_header(run, "rewrite")
    for r in run.targets:
        facts = [(label, format_bytes(getattr(r.before, attr)), format_bytes(getattr(r.after, attr)))
                 for label, attr in (("peak / device", "peak_bytes"), ("temp", "temp_bytes"),
                                     ("arguments", "argument_bytes"), ("outputs", "output_bytes"),
                                     ("aliased", "alias_bytes"), ("collectives / step", "collective_bytes"))]
        if r.before.time is not None and r.after.time is not None:
            facts.append((f"est. step time ({r.after.time.device})", format_seconds(r.before.time.seconds),
                          format_seconds(r.after.time.seconds)))
        pinned = table(("output", "before", "pinned to", "why"), (
            (a.path, earlier_sharding_text(a.before), pspec_text(a.after), a.why) for a in r.out_shardings))
        before_after = table(("", "before", "after"), facts)
        changes = table(("change", "kind", "axes", "shape", "before", "after", "source"), (
            (c.change, c.kind, ", ".join(c.mesh_axes), shape_text(c.dtype, c.shape), format_bytes(c.bytes_before),
             format_bytes(c.bytes_after), c.source or "-") for c in r.collective_changes), cls="sortable")
        v = r.validation
        validation = "" if v is None else (
            f"<p>Validation on {e(v.backend)}: skipped, {e(v.reason)}</p>" if not v.ran else
            f"<p>Validation on {e(v.backend)}: outputs match <b>{e(outputs_match_text(v))}</b>, shardings "
            f"as declared <b>{'yes' if v.shardings_match else 'NO'}</b>, median step {_ms(v.time_before_s)} "
            f"&rarr; {_ms(v.time_after_s)}.</p>")
        body += target_section(r.name, (
            f"<p><b>{e(r.verdict)}</b></p>"
            + "".join(f'<p class="warning">remaining: {e(x)}</p>' for x in r.remaining)
            + (f'<pre class="fixtext">jax.jit(..., {e(r.python_fix)})</pre>' if r.python_fix else
               f'<p class="warning">no Python change: {e(r.python_fix_missing)}</p>' if r.python_fix_missing else "")
            + f"<h3>Outputs pinned</h3>{pinned}<h3>Before and after</h3>{before_after}"
            f"<h3>Collectives that changed</h3>{changes}{validation}"))
    return page("jax-shard-lint rewrite", f"<main>{body}</main>")
