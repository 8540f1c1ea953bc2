"""The gate pipeline: ``GATE``'s stages, from finished target reports and a baseline to the merge
verdict (``gate``, ``snapshot``'s baseline): each target summarized (the baseline's figures), the
summaries compared against the baseline under the thresholds, and the compiler releases that differ
between the two compiles named. ``gate_verdict`` runs stages 2 and 3 in order around the analyzer's write
of the baseline (a callback: ``--update`` and ``--rebaseline-on-compiler-change`` rewrite it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..compare import gate as comparison
from ..models.gate import Baseline, BaselineTarget, GateResult, GateThresholds
from ..models.report import TargetReport
from .pass_manager import Pipeline

# compiler-change reads the two baselines' compiler releases, which the analyzer records beside the figures.
GATE = Pipeline("gate", ("summarize", "compare", "compiler-change"),
                reads={"summarize": (), "compare": ("summarize",), "compiler-change": ()})


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


def baseline_of(reports: list[TargetReport], versions: dict[str, Any], compilers: dict[str, str]) -> Baseline:
    """Stage 1 over every target: the baseline of these reports (targets by name), compiled by these
    releases (``versions``: the tool's, jax's and jaxlib's)."""
    return Baseline(**versions, compilers=compilers,
                    targets={r.name: summarize(r) for r in sorted(reports, key=lambda r: r.name)})


# The analyzer's write of the baseline file.
WriteBaseline = Callable[[Baseline], None]


def gate_verdict(baseline: Baseline | None, current: Baseline, thresholds: GateThresholds, baseline_name: str,
                 update: bool, rebaseline_on_compiler_change: bool, write: WriteBaseline) -> GateResult:
    """Stages 2 and 3: the current analysis against the baseline (None: none yet, only with ``update``); with
    ``update`` the current analysis becomes the baseline and passes; on a compiler change the verdict names
    it, and with ``rebaseline_on_compiler_change`` the baseline is rewritten and the gate passes."""
    if update:
        write(current)
        return compare(current, current.targets, thresholds, baseline_name)
    if baseline is None:
        raise ValueError("a gate with no baseline must update it")
    result = compare(baseline, current.targets, thresholds, baseline_name)  # 2
    changed = compiler_change(baseline.compilers, current.compilers,  # 3
                              {t.platform for t in current.targets.values()})
    if changed is None:
        return result
    if rebaseline_on_compiler_change:
        write(current)
        return result.model_copy(update={"compiler_change": changed, "rebaselined": True, "passed": True})
    return result.model_copy(update={"compiler_change": changed})
