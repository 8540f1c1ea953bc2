"""The gate's comparison table as Markdown for a pull-request comment."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.gate import GateResult
from ..common.markdown_text import cell


def render_gate_markdown(result: GateResult) -> str:
    status = "passed" if result.passed else "failed"
    if result.rebaselined:
        status = "passed (re-baselined on new compilers)"
    elif result.compiler_change and not result.passed:
        status = "failed, across compiler releases"
    lines = [f"### jax-shard-lint gate: {status}", ""]
    if result.compiler_change:
        lines += [f"> **Compilers changed:** {cell(result.compiler_change)}.", ""]
    lines += [
        f"Baseline {cell(result.baseline)}; limits: peak +{result.thresholds.peak_increase * 100:g}%, collective "
        f"bytes +{result.thresholds.collective_increase * 100:g}%, estimated step time "
        f"+{result.thresholds.time_increase * 100:g}%, new all-gather or all-to-all over "
        f"{format_bytes(result.thresholds.new_collective_bytes)}.",
        "",
        "| target | metric | before | after | ratio | alert |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result.rows:
        ratio = "" if r.ratio is None else ("new" if r.ratio == float("inf") else f"{r.ratio:.3f}x")
        alert = f"**{cell(r.alert)}**" if r.alert else ""
        lines.append(f"| {cell(r.target)} | {cell(r.metric.strip())} | {r.display(r.before)} | "
                     f"{r.display(r.after)} | {ratio} | {alert} |")
    return "\n".join(lines) + "\n"
