"""Suppression comments applied across a run (its targets' findings and the source rules'),
unused ones reported (SL001), and the local modules of a script found by reading imports.
"""

from __future__ import annotations

from ...passes.models.report import Finding, TargetReport
from ...passes.pipelines.run_wide import Suppression, suppressed, suppressions_in
from .config import Settings
from .display_paths import same_file


def apply_run_suppressions(
    reports: list[TargetReport], files: list[str], settings: Settings, report_unused: bool,
    extra: list[Finding] | None = None,
) -> tuple[list[TargetReport], list[Finding]]:
    """Suppress target findings and run-wide ones (``extra``: the source rules'),
    and report suppressions that silence nothing (the run-wide pipeline's stages)."""
    suppressions: list[Suppression] = []
    for path in sorted(set(files)):
        try:
            with open(path, encoding="utf-8") as f:
                suppressions.extend(suppressions_in(path, f.read()))
        except OSError:
            continue
    return suppressed(reports, list(extra or []), suppressions, same_file, settings.ignore, settings.severities,
                      report_unused)
