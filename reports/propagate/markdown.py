"""``propagate`` as Markdown: agreement with Shardy, the predicted communication and
the sharded values."""

from __future__ import annotations

from ...passes.common.axes import axes_text
from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ..common.agreement_text import agreement_text, prediction_counts_text
from ..common.markdown_text import cell


def render_propagation_markdown(run) -> str:

    lines = []
    for t in run.targets:
        a = t.agreement_with_shardy
        lines += [f"### jax-shard-lint propagate: {cell(t.name)}", ""]
        if a is not None:
            lines += [cell(_sentence(agreement_text(a))) + ".", ""]
        if t.prediction_counts is not None:
            lines += [cell(_sentence(prediction_counts_text(t.prediction_counts))) + ".", ""]
        if t.not_compiled:
            lines += [cell(f"Not compiled: {t.not_compiled}."), ""]
        lines += ["| kind | bytes | axes | op | source | compiled | why | why not compiled |",
                  "| --- | ---: | --- | --- | --- | --- | --- | --- |"]
        for p in t.predicted[:30]:
            matched = {True: "yes", False: "no", None: "-"}[p.matched_compiled]
            lines.append(f"| {p.kind} | {format_bytes(p.bytes)} | {cell(axes_text(p.mesh_axes, t.mesh, ', '))} | "
                         f"{cell(p.op)} | "
                         f"{cell(str(p.source or '-'))} | {matched} | {cell(p.reason)} | "
                         f"{cell(p.not_compiled_because or '')} |")
        sharded = [v for v in t.values if any(v.sharding)][:20]
        lines += ["", "| value | shape | sharding | source | from |", "| --- | --- | --- | --- | --- |"]
        for v in sharded:
            shape = f"{v.dtype}{v.shape}"
            lines.append(f"| {cell(v.name)} | {cell(shape)} | {cell(pspec_text(v.sharding))} | "
                         f"{cell(str(v.source or '-'))} | {cell(v.seed or '-')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _sentence(text: str) -> str:
    # str.capitalize would lower the rest ("MiB", "Shardy").
    return text[:1].upper() + text[1:]
