"""One lint run: load the script's targets, lower and compile each, run the
pass pipeline, apply suppressions, and build the report."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ...passes.models.report import LintReport
from ...passes.pipelines.rule_stage import report_rules
from .. import __version__
from ..adapter import jax_adapter
from ..backend.checked_fixes import checked_fixes
from ..backend.conflict_checks import conflict_check
from ..backend.device_selection import check_lowered_for, run_warnings
from ..backend.heap import paused_collector
from ..backend.script_targets import load_script
from ..backend.side_by_side import one_compile_per_program
from ..backend.target_analysis import analyze_lowered
from ..context.config import Settings
from ..context.display_paths import relativize
from ..context.program_files import apply_run_suppressions, program_files, program_findings
from ..supervision import isolation

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LintRequest:
    script: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()


def lint(request: LintRequest, settings: Settings, progress: Progress | None = None) -> LintReport:
    say = progress or (lambda _msg: None)
    loaded = load_script(request.script, request.params, settings)
    settings, where = loaded.settings, loaded.where
    say(f"collecting targets from {where}")
    targets = loaded.call(request.targets)
    reports = []
    for name, lowered in targets.items():
        say(f"analysing {name}")
        isolation.phase(where, f"compiling target {name!r}")
        check_lowered_for(lowered, name, settings, where)
        with paused_collector():
            text, devices = jax_adapter.stablehlo_text(lowered), jax_adapter.device_assignment(lowered)
            # With the fixes checked, a why chain from another argument is checked too (a compile for each such
            # argument): printed only where that argument's sharding changes the finding's collectives.
            meets = conflict_check(text, settings, where, devices) if settings.check_fixes else None
            report = analyze_lowered(name, lowered, settings, where, meets)
            if settings.check_fixes:
                say(f"compiling the fixes {name}'s findings suggest, to check them")
                with one_compile_per_program():  # a program two checks arrive at is compiled once
                    report = checked_fixes(report, text, settings, where, devices, progress)
        reports.append(report.model_copy(update={"warnings": report.warnings + run_warnings(settings)}))
    program = program_files(where, settings) if os.path.exists(where) else None
    from_source, source_notes = program_findings(program, settings) if program else ([], [])
    files = [os.path.abspath(where)] + list(program.files if program else ()) + [
        f.source.file for r in reports for f in r.findings if f.source is not None
    ]
    reports, run_findings = apply_run_suppressions(
        reports, files, settings, report_unused=not request.targets, extra=from_source
    )
    jax_version, jaxlib_version = jax_adapter.versions()
    report = LintReport(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
        script=where, targets=reports, findings=run_findings,
        rules=report_rules(settings.ignore, settings.severities), source_notes=source_notes,
    )
    return relativize(report, os.getcwd())
