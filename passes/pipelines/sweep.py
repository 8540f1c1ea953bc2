"""The sweep pipeline: ``SWEEP``'s stages, from the finished reports of each (parameter values, mesh)
compile to the ranking ``sweep`` prints: each report a candidate (or a failed one), then the candidates
ranked by estimated step time among those that fit the budget."""

from __future__ import annotations

from typing import Any

from ..compare import sweep as ranking
from ..compare.sweep import params_label
from ..models.report import TargetReport
from ..models.sweep import SweepCandidate
from .pass_manager import Pipeline

# A candidate's parameter values as the report and the progress lines name them.
__all__ = ["params_label", "candidate_from_report", "failed_candidate", "rank"]

SWEEP = Pipeline("sweep", ("candidates", "rank"))


def candidate_from_report(params: dict[str, Any], report: TargetReport, budget: int | None) -> SweepCandidate:
    """Stage 1: one compiled target of one parameter setting as a candidate."""
    return SWEEP.run("candidates", ranking.candidate_from_report, params, report, budget)


def failed_candidate(params: dict[str, Any], error: str) -> SweepCandidate:
    """Stage 1: a parameter setting that did not compile, with its error."""
    return SWEEP.run("candidates", ranking.failed_candidate, params, error)


def rank(candidates: list[SweepCandidate]) -> list[SweepCandidate]:
    """Stage 2: fitting candidates by time (ties by traffic), then those over the budget, then the failures."""
    return SWEEP.run("rank", ranking.rank, candidates)
