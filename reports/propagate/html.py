"""``propagate`` as one HTML page: sharded values with provenance, predicted
communication, agreement with Shardy."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.propagation import PropagateRun
from ..common.agreement_text import agreement_text, prediction_counts_text
from ..common.html_page import e, page, run_header
from ..common.tensor_text import shape_text


def render_propagation_html(run: PropagateRun) -> str:
    body = run_header(run, "propagate")
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
            f"<td>{ {True: 'yes', False: 'no', None: '-'}[p.matched_compiled] }</td><td>{e(p.reason)}</td>"
            f"<td>{e(p.not_compiled_because or '')}</td></tr>"
            for p in t.predicted
        )
        a = t.agreement_with_shardy
        agreement = "" if a is None else (
            f"<p data-agreement=\"{'' if a.fraction is None else a.fraction}\">{e(_sentence(agreement_text(a)))}."
            "</p>" + "".join(
                f"<p class=\"muted\">{e(d.value)} ({e(d.source) if d.source else '-'}): ours {e(pspec_text(d.ours))}, "
                f"Shardy {e(pspec_text(d.shardy))}</p>" for d in a.disagreements[:20]))
        body += (
            f'<section class="target" data-target="{e(t.name)}"><h2>{e(t.name)}</h2>{agreement}'
            + (f"<p>{e(_sentence(prediction_counts_text(t.prediction_counts)))}.</p>"
               if t.prediction_counts is not None else "")
            + (f'<p class="muted">Not compiled: {e(t.not_compiled)}.</p>' if t.not_compiled else "") +
            '<h3>Sharded values</h3><table class="sortable"><thead><tr><th>value</th><th>shape</th><th>sharding</th>'
            f"<th>per device</th><th>source</th><th>from</th><th>provenance</th></tr></thead><tbody>{values}</tbody>"
            '</table><h3>Predicted communication</h3><table class="sortable"><thead><tr><th>kind</th><th>bytes</th>'
            "<th>axes</th><th>op</th><th>source</th><th>compiled</th><th>why</th><th>why not compiled</th></tr></thead>"
            f"<tbody>{predicted}</tbody></table></section>"
        )
    return page("jax-shard-lint propagate", f"<main>{body}</main>")


def _sentence(text: str) -> str:
    # str.capitalize would lower the rest ("MiB", "Shardy").
    return text[:1].upper() + text[1:]
