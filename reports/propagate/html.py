"""``propagate`` as one HTML page: sharded values with provenance, predicted
communication, agreement with Shardy."""

from __future__ import annotations

from ...passes.common.axes import axes_text
from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.propagation import PropagateRun
from ..common.agreement_text import agreement_text, prediction_counts_text
from ..common.html_page import e, page, run_header
from ..common.html_table import cell, markup, table, target_section
from ..common.tensor_text import shape_text


def render_propagation_html(run: PropagateRun) -> str:
    body = run_header(run, "propagate")
    for t in run.targets:
        values = table(("value", "shape", "sharding", "per device", "source", "from", "provenance"), (
            (v.name, shape_text(v.dtype, v.shape), pspec_text(v.sharding),
             cell(format_bytes(v.per_device_bytes), sort=v.per_device_bytes), v.source or "-", v.seed or "-",
             markup("<ol>" + "".join(
                 f"<li>{e(p.value)} {e(pspec_text(p.sharding))}{' via ' + e(p.op) if p.op else ''}"
                 f"{' at ' + e(p.source) if p.source else ''}</li>" for p in v.provenance) + "</ol>"))
            for v in t.values if any(v.sharding)), cls="sortable")
        predicted = table(("kind", "bytes", "axes", "op", "source", "compiled", "why", "why not compiled"), (
            (p.kind, cell(format_bytes(p.bytes), sort=p.bytes), axes_text(p.mesh_axes, t.mesh, ", "), p.op,
             p.source or "-",
             {True: "yes", False: "no", None: "-"}[p.matched_compiled], p.reason, p.not_compiled_because or "")
            for p in t.predicted), cls="sortable")
        a = t.agreement_with_shardy
        agreement = "" if a is None else (
            f"<p data-agreement=\"{'' if a.fraction is None else a.fraction}\">{e(_sentence(agreement_text(a)))}."
            "</p>" + "".join(
                f"<p class=\"muted\">{e(d.value)} ({e(d.source) if d.source else '-'}): ours {e(pspec_text(d.ours))}, "
                f"Shardy {e(pspec_text(d.shardy))}</p>" for d in a.disagreements[:20]))
        body += target_section(t.name, (
            agreement
            + (f"<p>{e(_sentence(prediction_counts_text(t.prediction_counts)))}.</p>"
               if t.prediction_counts is not None else "")
            + (f'<p class="muted">Not compiled: {e(t.not_compiled)}.</p>' if t.not_compiled else "")
            + f"<h3>Sharded values</h3>{values}<h3>Predicted communication</h3>{predicted}"))
    return page("jax-shard-lint propagate", f"<main>{body}</main>")


def _sentence(text: str) -> str:
    # str.capitalize would lower the rest ("MiB", "Shardy").
    return text[:1].upper() + text[1:]
