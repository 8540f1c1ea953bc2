"""A target's fixes compiled and measured, as lint and check show them: the fix-check pipeline
(``passes/pipelines/fix_checks.py``: its stages and their order), each stage's compiles the analyzer's
(the parameter fixes, suggest's layout where a finding's own fix failed, the stated layouts, SL102's
loop weight gathers, the batch that leaves a mesh axis idle)."""

from __future__ import annotations

from collections.abc import Callable

from ...passes.models.report import TargetReport
from ...passes.pipelines import fix_checks as fix_check_pipeline
from ..context.config import Settings
from .advice.solver_fixes import with_solver_fixes
from .fft_fixes import with_fft_fixes
from .fix_checks import check_fixes
from .idle_batch_fixes import check_idle_batch_fixes
from .layout_fix_checks import check_layout_fixes
from .loop_weight_gathers import check_loop_weight_gathers


def checked_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                  progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with its fixes compiled and measured, lint's and check's alike."""
    checked = fix_check_pipeline.check_fixes(
        report,
        lambda r: check_fixes(r, text, settings, where, devices, progress),
        lambda r: with_solver_fixes(r, text, settings, where, devices, progress),
        lambda r: check_layout_fixes(r, text, settings, where, devices, progress),
        lambda r: check_loop_weight_gathers(r, text, settings, where, devices, progress),
        lambda r: check_idle_batch_fixes(r, text, settings, where, devices, progress))
    # The FFT findings' shard_map fixes, after their argument's move was measured (fft_fixes.py).
    return with_fft_fixes(checked, text, settings, where, devices, progress)
