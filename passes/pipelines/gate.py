"""The gate pipeline: ``GATE``'s stages, from finished target reports and a baseline to the merge
verdict (``gate``, ``snapshot``'s baseline): each target summarized (the baseline's figures), the
summaries compared against the baseline under the thresholds, and the compiler releases that differ
between the two compiles named."""

from __future__ import annotations

from ..compare import gate as comparison
from ..models.gate import Baseline, BaselineTarget, GateResult, GateThresholds
from ..models.report import TargetReport
from .pass_manager import Pipeline

GATE = Pipeline("gate", ("summarize", "compare", "compiler-change"))


def summarize(report: TargetReport) -> BaselineTarget:
    """Stage 1: a target's figures as the baseline keeps them."""
    return GATE.run("summarize", comparison.summarize, report)


def compare(baseline: Baseline, current: dict[str, BaselineTarget], thresholds: GateThresholds,
            baseline_name: str) -> GateResult:
    """Stage 2: each target's figures against the baseline's, regressions flagged."""
    return GATE.run("compare", comparison.compare, baseline, current, thresholds, baseline_name)


def compiler_change(before: dict[str, str], after: dict[str, str], platforms: set[str]) -> str | None:
    """Stage 3: the compiler releases that differ between the baseline's compile and this one (None: none)."""
    return GATE.run("compiler-change", comparison.compiler_change, before, after, platforms)
