"""A target's fixes compiled and measured, as lint and check show them: the fix-check pipeline
(``passes/pipelines/fix_checks.py``: its stages and their order), each stage's compiles the analyzer's
(the parameter fixes, suggest's layout where a finding's own fix failed, the stated layouts, SL102's
loop weight gathers, the batch that leaves a mesh axis idle, suggest's single moves for a collective no
argument explains)."""

from __future__ import annotations

from collections.abc import Callable

from ...passes.models.report import TargetReport
from ...passes.pipelines import fix_checks as fix_check_pipeline
from ...passes.pipelines.entry import entry_signature
from ..adapter import jax_adapter
from ..context.config import Settings
from . import compile_memo
from .advice.rival_moves import with_rival_moves
from .advice.solver_fixes import with_solver_fixes
from .candidate_compile import as_written_known
from .fft_fixes import with_fft_fixes
from .fix_checks import check_fixes
from .fix_verdicts import without_fixes_not_measured_better
from .idle_batch_fixes import check_idle_batch_fixes
from .layout_fix_checks import check_layout_fixes
from .loop_weight_gathers import check_loop_weight_gathers
from .unattributed_reshard_fixes import check_unattributed_reshards


def checked_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                  progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with its fixes compiled and measured, lint's and check's alike. A candidate whose program is
    the one lint compiled is measured on lint's compile (``as_written_known``)."""
    sig = entry_signature(jax_adapter.parse_stablehlo(text), fix_check_pipeline.FIX_CHECKS)
    as_written_known(report, text, sig, settings, where, devices)

    def stage(name: str, check: Callable[..., TargetReport]) -> fix_check_pipeline.FixStage:
        def run(r: TargetReport) -> TargetReport:
            with compile_memo.stage_logged(name):  # the compile log names the stage of each compile, and its cost
                return check(r, text, settings, where, devices, progress)
        return run

    checked = fix_check_pipeline.check_fixes(
        report, stage("parameter-fixes", check_fixes), stage("single-move-rivals", with_rival_moves),
        stage("solver-fixes", with_solver_fixes),
        stage("stated-layout-fixes", check_layout_fixes), stage("loop-weight-gathers", check_loop_weight_gathers),
        stage("idle-batch-axes", check_idle_batch_fixes),
        stage("unattributed-reshards", check_unattributed_reshards))
    # The FFT findings' shard_map fixes, after their argument's move was measured (fft_fixes.py); then the
    # findings that stand only where their fix is measured better, without those whose fix is not.
    return without_fixes_not_measured_better(stage("fft-fixes", with_fft_fixes)(checked),
                                             settings.pass_config.resolved_options())
