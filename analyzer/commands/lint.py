"""One lint run: the run-wide pipeline's order (``passes/pipelines/run_wide.lint_run``: targets, source
rules, suppressions, the rules documented) around the analyzer's part: load the script's targets, lower,
compile and analyse each and check its fixes, find the program's files, and build the report."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ...passes.models.report import LintReport, TargetReport
from ...passes.pipelines.run_wide import ProgramSource, lint_run
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
from ..context.display_paths import display_path, relativize, same_file
from ..context.program_files import program_files, read_text
from ..supervision import isolation

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LintRequest:
    script: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    # The caller reads the reports' figures only (snapshot's baseline): a cached report of the same program
    # whose why chains were checked serves it (backend/target_analysis.analyze_lowered).
    figures_only: bool = False


def lint(request: LintRequest, settings: Settings, progress: Progress | None = None) -> LintReport:
    """The lint run (``passes/pipelines/run_wide.lint_run``: its order) around this module's callbacks: the
    script loaded, each target lowered, compiled, analysed and its fixes checked; the program's files found;
    a file read."""
    say = progress or (lambda _msg: None)
    loaded = load_script(request.script, request.params, settings)
    settings, where = loaded.settings, loaded.where

    def analyze_targets() -> list[TargetReport]:
        say(f"collecting targets from {where}")
        reports = []
        for name, lowered in loaded.call(request.targets).items():
            say(f"analysing {name}")
            isolation.phase(where, f"compiling target {name!r}")
            check_lowered_for(lowered, name, settings, where)
            with paused_collector():
                text, devices = jax_adapter.stablehlo_text(lowered), jax_adapter.device_assignment(lowered)
                # With the fixes checked, a why chain from another argument is checked too (a compile for each
                # such argument): printed only where that argument's sharding changes the finding's collectives.
                meets = conflict_check(text, settings, where, devices) if settings.check_fixes else None
                report = analyze_lowered(name, lowered, settings, where, meets, request.figures_only)
                if settings.check_fixes:
                    say(f"compiling the fixes {name}'s findings suggest, to check them")
                    with one_compile_per_program():  # a program two checks arrive at is compiled once
                        report = checked_fixes(report, text, settings, where, devices, progress)
            reports.append(report.model_copy(update={"warnings": report.warnings + run_warnings(settings)}))
        return reports

    def read_program() -> ProgramSource | None:
        if not os.path.exists(where):
            return None
        program = program_files(where, settings)
        return ProgramSource(program.files, program.roots, program.texts)

    run = lint_run(analyze_targets, read_program, read_text, lambda path: display_path(path, os.getcwd()),
                   same_file, os.path.abspath(where), settings.ignore, settings.severities,
                   report_unused=not request.targets)
    jax_version, jaxlib_version = jax_adapter.versions()
    report = LintReport(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
        script=where, targets=run.reports, findings=run.findings, rules=run.rules, source_notes=run.source_notes,
    )
    return relativize(report, os.getcwd())
