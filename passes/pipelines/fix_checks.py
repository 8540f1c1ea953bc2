"""The fix-check pipeline: ``FIX_CHECKS``'s stages, in the one order lint and check run them over a
target's report (each fix compiled and measured before it is printed). The analyzer compiles; each fix stage
is its callback, the report in and the report with that stage's fixes checked out. The checks read a
program's entry signature and its state's round trips (the arguments a fix moves, the state outputs a
candidate returns resharded: suggest's measured versions too) as this pipeline's stages 1 and 2:

3. parameter-fixes: each finding's own fix, a parameter's new sharding (the rules with
   ``FixKind.parameter``), a missing donation, and the state fixes of the rules ``about_state``;
4. single-move-rivals: a parameter fix measured better, compared with suggest's other single moves of the
   same value (the best by suggest's rule printed: one recommendation per value);
5. solver-fixes: suggest's layout for the arguments of a finding whose own fix was not measured better
   (the rules with ``argument_layout``);
6. stated-layout-fixes: a stated layout edited (the rules with ``FixKind.stated_layout``);
7. loop-weight-gathers: SL102's FSDP fix, a loop body's weight gathered where its matmul reads it, for a
   finding no stage before it checked a fix for;
8. idle-batch-axes: SL105's finding about a batch that leaves mesh axes idle, the batch on every axis;
9. unattributed-reshards: SL105's finding about a collective no argument explains, suggest's single moves
   onto the collective's mesh axes (or its generic fix marked advice).

Each stage reads and rewrites only the findings of its rules, so the order is the one the
reports are written in, never a choice of the command."""

from __future__ import annotations

from collections.abc import Callable

from ..models.report import TargetReport
from .pass_manager import Pipeline

# Each fix stage reads the report the one before it left: a finding whose own fix was measured better is not
# tried again with suggest's layout, nor its stated layout edited.
FIX_CHECKS = Pipeline("fix-checks", (
    "entry-signature", "state-roundtrips", "parameter-fixes", "single-move-rivals", "solver-fixes",
    "stated-layout-fixes", "loop-weight-gathers", "idle-batch-axes", "unattributed-reshards",
), reads={
    "entry-signature": (), "state-roundtrips": ("entry-signature",),
    "parameter-fixes": ("entry-signature", "state-roundtrips"),
    "single-move-rivals": ("entry-signature", "state-roundtrips", "parameter-fixes"),
    "solver-fixes": ("single-move-rivals",),
    "stated-layout-fixes": ("entry-signature", "state-roundtrips", "solver-fixes"),
    "loop-weight-gathers": ("entry-signature", "stated-layout-fixes"),
    "idle-batch-axes": ("entry-signature", "loop-weight-gathers"),
    "unattributed-reshards": ("entry-signature", "state-roundtrips", "idle-batch-axes"),
})

# A stage as the analyzer runs it: the report in, the report with the stage's fixes compiled and measured.
FixStage = Callable[[TargetReport], TargetReport]


def check_fixes(report: TargetReport, parameter_fixes: FixStage, single_move_rivals: FixStage,
                solver_fixes: FixStage, stated_layout_fixes: FixStage, loop_weight_gathers: FixStage,
                idle_batch_axes: FixStage, unattributed_reshards: FixStage) -> TargetReport:
    """The report with every stage's fixes checked, in ``FIX_CHECKS``'s order."""
    report = FIX_CHECKS.run("parameter-fixes", parameter_fixes, report)
    report = FIX_CHECKS.run("single-move-rivals", single_move_rivals, report)
    report = FIX_CHECKS.run("solver-fixes", solver_fixes, report)
    report = FIX_CHECKS.run("stated-layout-fixes", stated_layout_fixes, report)
    report = FIX_CHECKS.run("loop-weight-gathers", loop_weight_gathers, report)
    report = FIX_CHECKS.run("idle-batch-axes", idle_batch_axes, report)
    return FIX_CHECKS.run("unattributed-reshards", unattributed_reshards, report)
