"""Markdown for pull-request comments: the gate's comparison table and a
compact lint summary."""

from __future__ import annotations

import html
import re

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.gate import GateResult
from ...passes.models.report import LintReport, where_text
from ..common.agreement_text import agreement_text
from ..common.time_text import format_seconds


def _cell(text: str) -> str:
    """Text from a program (names, paths, messages) as inert Markdown: one line, HTML
    as entities (no <script>, no <img onerror>, no <!--), and the characters that
    make links, code or table cells escaped (no [x](javascript:...)). Underscores
    stay: file names are full of them and intraword ones are not emphasis."""
    text = " ".join(text.replace("\r", "\n").split("\n"))
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`\[\]|])", r"\\\1", text)


def render_gate_markdown(result: GateResult) -> str:
    status = "passed" if result.passed else "failed"
    lines = [
        f"### jax-shard-lint gate: {status}",
        "",
        f"Baseline {_cell(result.baseline)}; limits: peak +{result.thresholds.peak_increase * 100:g}%, collective "
        f"bytes +{result.thresholds.collective_increase * 100:g}%, estimated step time "
        f"+{result.thresholds.time_increase * 100:g}%, new all-gather or all-to-all over "
        f"{format_bytes(result.thresholds.new_collective_bytes)}.",
        "",
        "| target | metric | before | after | ratio | alert |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result.rows:
        ratio = "" if r.ratio is None else ("new" if r.ratio == float("inf") else f"{r.ratio:.3f}x")
        alert = f"**{_cell(r.alert)}**" if r.alert else ""
        lines.append(f"| {_cell(r.target)} | {_cell(r.metric.strip())} | {r.display(r.before)} | "
                     f"{r.display(r.after)} | {ratio} | {alert} |")
    return "\n".join(lines) + "\n"


def render_lint_markdown(report: LintReport) -> str:
    lines = [f"### jax-shard-lint: {len(report.all_findings())} finding(s)", ""]
    lines += ["| target | platform | peak / device | budget | collectives / step | est. step time | findings |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for t in report.targets:
        m = t.memory
        counts = {}
        for f in t.findings:
            counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
        found = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
        time = _cell("~" + format_seconds(t.time.seconds) + (" (nominal)" if t.time.nominal else "")) if t.time else "-"
        lines.append(
            f"| {_cell(t.name)} | {_cell(t.platform)} | {format_bytes(m.peak_bytes) if m else '-'} | "
            f"{format_bytes(m.budget_bytes) if m and m.budget_bytes else '-'} | "
            f"{format_bytes(sum(c.bytes * c.count for c in t.collectives))} | "
            f"{time} | {found} |"
        )
    findings = [(t.name, f) for t in report.targets for f in t.findings] + [("(run)", f) for f in report.findings]
    if findings:
        lines += ["", "| severity | rule | target | where | message | fix |", "| --- | --- | --- | --- | --- | --- |"]
        for name, f in findings:
            where = _cell(where_text(f.source, f.via)) if (f.source or f.via) else "-"
            lines.append(f"| {f.severity.value} | {f.rule} {f.name} | {_cell(name)} | {where} | "
                         f"{_cell(f.message)} | {_cell(f.fix or '')} |")
    return "\n".join(lines) + "\n"


def render_propagation_markdown(run) -> str:
    from ...passes.common.sharding_text import pspec_text

    lines = []
    for t in run.targets:
        a = t.agreement_with_shardy
        lines += [f"### jax-shard-lint propagate: {_cell(t.name)}", ""]
        if a is not None:
            lines += [_cell(agreement_text(a).capitalize()) + ".", ""]
        if t.not_compiled:
            lines += [_cell(f"Not compiled: {t.not_compiled}."), ""]
        lines += ["| kind | bytes | axes | op | source | compiled | why |",
                  "| --- | ---: | --- | --- | --- | --- | --- |"]
        for p in t.predicted[:30]:
            matched = {True: "yes", False: "no", None: "-"}[p.matched_compiled]
            lines.append(f"| {p.kind} | {format_bytes(p.bytes)} | {_cell(', '.join(p.mesh_axes))} | {_cell(p.op)} | "
                         f"{_cell(str(p.source or '-'))} | {matched} | {_cell(p.reason)} |")
        sharded = [v for v in t.values if any(v.sharding)][:20]
        lines += ["", "| value | shape | sharding | source | from |", "| --- | --- | --- | --- | --- |"]
        for v in sharded:
            lines.append(f"| {_cell(v.name)} | {v.dtype}{v.shape} | {_cell(pspec_text(v.sharding))} | "
                         f"{_cell(str(v.source or '-'))} | {_cell(v.seed or '-')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def render_rewrite_markdown(run) -> str:
    from ...passes.common.sharding_text import pspec_text

    lines = []
    for r in run.targets:
        lines += [f"### jax-shard-lint rewrite: {_cell(r.name)}", "", r.verdict, ""]
        lines += [f"- remaining: {_cell(x)}" for x in r.remaining]
        if r.python_fix:
            lines += ["", f"`jax.jit(..., {r.python_fix})`", ""]
        lines += ["| | before | after |", "| --- | ---: | ---: |"]
        for label, attr in (("peak / device", "peak_bytes"), ("collectives / step", "collective_bytes")):
            lines.append(
                f"| {label} | {format_bytes(getattr(r.before, attr))} | {format_bytes(getattr(r.after, attr))} |")
        if r.before.time is not None and r.after.time is not None:
            lines.append(f"| est. step time ({_cell(r.after.time.device)}) | {format_seconds(r.before.time.seconds)} | "
                         f"{format_seconds(r.after.time.seconds)} |")
        if r.out_shardings:
            lines += ["", "| output | before | pinned to |", "| --- | --- | --- |"]
            lines += [f"| {_cell(a.path)} | {_cell(pspec_text(a.before))} | {_cell(pspec_text(a.after))} |"
                      for a in r.out_shardings]
        lines.append("")
    return "\n".join(lines) + "\n"
