"""Suppression comments applied across a run (its targets' findings and the source rules'),
unused ones reported (SL001), and the local modules of a script found by reading imports.
"""

from __future__ import annotations

from ...passes.models.report import Finding, TargetReport
from ...passes.models.rule_codes import SL001
from ...passes.pipelines.rule_stage import sort_findings
from ...passes.rules.registry import Emitter
from ...passes.rules.suppressions import Suppression, apply_suppressions, find_suppressions
from ...passes.rules.table import RULES
from .config import Settings
from .display_paths import same_file


def apply_run_suppressions(
    reports: list[TargetReport], files: list[str], settings: Settings, report_unused: bool,
    extra: list[Finding] | None = None,
) -> tuple[list[TargetReport], list[Finding]]:
    """Suppress target findings and run-wide ones (``extra``: the source rules'),
    and report suppressions that silence nothing."""
    suppressions: list[Suppression] = []
    for path in sorted(set(files)):
        try:
            with open(path, encoding="utf-8") as f:
                suppressions.extend(find_suppressions(path, f.read()))
        except OSError:
            continue
    extra = list(extra or [])
    if not suppressions:
        return reports, sort_findings(extra)
    used: set[tuple[str, int, str]] = set()
    out = []
    everything = {(s, c) for s in suppressions for c in (s.codes or ("*",))}
    for rep in reports:
        outcome = apply_suppressions(rep.findings, suppressions, same_file)
        for s, code in everything - set(outcome.unused):
            used.add((s.file, s.line, code))
        out.append(rep.model_copy(update={"findings": list(outcome.kept), "suppressed": outcome.suppressed}))
    outcome = apply_suppressions(extra, suppressions, same_file)
    for s, code in everything - set(outcome.unused):
        used.add((s.file, s.line, code))
    run_findings: list[Finding] = list(outcome.kept)
    rule = RULES[SL001.code]
    if report_unused and SL001.code not in settings.ignore:
        unused = [
            (s, c) for s in suppressions for c in (s.codes or ("*",))
            if (s.file, s.line, c) not in used and (c == "*" or c not in settings.ignore)
        ]
        emitter = Emitter(rule, settings.severities.get(SL001.code, rule.severity))
        rule.check(unused, emitter)
        run_findings += emitter.findings
    return out, sort_findings(run_findings)
