"""The sweep pipeline: ``SWEEP``'s stages, from the finished reports of each (parameter values, mesh)
compile to the ranking ``sweep`` prints: each report a candidate (or a failed one), then the candidates
ranked by estimated step time among those that fit the budget. ``sweep`` runs the two in order after
the analyzer's compiles of the candidates (a callback: in this process, in children or as Ray tasks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..compare import sweep as ranking
from ..models.report import TargetReport
from ..models.sweep import SweepCandidate
from .pass_manager import Pipeline

# A candidate's parameter values as the report and the progress lines name them.
__all__ = ["candidate_from_report", "failed_candidate", "rank", "CompiledSetting", "sweep"]

SWEEP = Pipeline("sweep", ("candidates", "rank"), reads={"candidates": (), "rank": ("candidates",)})


def candidate_from_report(params: dict[str, Any], report: TargetReport, budget: int | None) -> SweepCandidate:
    """Stage 1: one compiled target of one parameter setting as a candidate."""
    return SWEEP.run("candidates", ranking.candidate_from_report, params, report, budget)


def failed_candidate(params: dict[str, Any], error: str) -> SweepCandidate:
    """Stage 1: a parameter setting that did not compile, with its error."""
    return SWEEP.run("candidates", ranking.failed_candidate, params, error)


def rank(candidates: list[SweepCandidate]) -> list[SweepCandidate]:
    """Stage 2: fitting candidates by time (ties by traffic), then those over the budget, then the failures."""
    return SWEEP.run("rank", ranking.rank, candidates)


@dataclass(frozen=True)
class CompiledSetting:
    """One parameter setting as the analyzer's compile left it: its targets' reports, or why it failed."""

    params: dict[str, Any]
    reports: list[TargetReport] | None  # None: it failed
    error: str | None = None


_Run = TypeVar("_Run")

# The analyzer's compiles of every setting, in order, with what it reports of how they ran.
CompileSettings = Callable[[], tuple[list[CompiledSetting], _Run]]


def sweep(compile_settings: CompileSettings[_Run], budget: int | None) -> tuple[list[SweepCandidate], _Run]:
    """``SWEEP``'s stages around the analyzer's compiles: each setting's candidates, then the ranking."""
    compiled, how = compile_settings()
    found: list[SweepCandidate] = []
    for c in compiled:
        if c.reports is None:
            found.append(failed_candidate(c.params, c.error or "no report came back"))  # 1
        else:
            found += [candidate_from_report(c.params, t, budget) for t in c.reports]  # 1
    return rank(found), how  # 2
