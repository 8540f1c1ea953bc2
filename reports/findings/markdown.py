"""The findings report (lint, run, check) as Markdown for a pull-request comment:
one summary row per target, then the findings."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.report import (
    LintReport,
    where_text,
)
from ..common.collective_totals import in_unknown_loops, step_bytes
from ..common.markdown_text import cell
from ..common.repeated_fixes import printed_fixes
from .none_found import none_found


def render_lint_markdown(report: LintReport) -> str:
    lines = [f"### jax-shard-lint: {len(report.all_findings())} finding(s)", ""]
    lines += ["| target | platform | peak / device | budget | collectives / step | est. step time | findings |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for t in report.targets:
        m = t.memory
        counts: dict[str, int] = {}
        for f in t.findings:
            counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
        found = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or cell(none_found(t))
        time = cell("~" + format_seconds(t.time.seconds) + (" (nominal)" if t.time.nominal else "")) if t.time else "-"
        lines.append(
            f"| {cell(t.name)} | {cell(t.platform)} | {format_bytes(m.peak_bytes) if m else '-'} | "
            f"{format_bytes(m.budget_bytes) if m and m.budget_bytes else '-'} | "
            f"{'at least ' if in_unknown_loops(t.collectives) else ''}{format_bytes(step_bytes(t.collectives))} | "
            f"{time} | {found} |"
        )
    findings = [(t.name, f) for t in report.targets for f in t.findings] + [("(run)", f) for f in report.findings]
    if findings:
        lines += ["", "| severity | rule | target | where | message | fix |", "| --- | --- | --- | --- | --- | --- |"]
        fixes = [fix for t in report.targets for fix in printed_fixes(t.findings)] + printed_fixes(report.findings)
        for (name, f), fix in zip(findings, fixes):
            where = cell(where_text(f.source, f.via)) if (f.source or f.via) else "-"
            lines.append(f"| {f.severity.value} | {f.rule} {f.name} | {cell(name)} | {where} | "
                         f"{cell(f.message)} | {cell(fix or '')} |")
    return "\n".join(lines) + "\n"
