"""Ranking the candidates of a sweep: each (parameter values, target) pair that
compiled, by estimated step time among those that fit the memory budget, with
the Pareto front of peak memory against time marked."""

from __future__ import annotations

from typing import Any

from ..common.durations import format_seconds
from ..models.report import TargetReport
from ..models.sweep import SweepCandidate, params_label


def candidate_from_report(params: dict[str, Any], report: TargetReport, budget: int | None) -> SweepCandidate:
    m = report.memory
    peak = m.peak_bytes if m else None
    label = f"{params_label(params)} / {report.name}" if params else report.name
    return SweepCandidate(
        label=label, params=params, target=report.name, peak_bytes=peak, budget_bytes=budget,
        fits=None if budget is None or peak is None else peak <= budget,
        collective_bytes=sum(c.bytes * c.count for c in report.collectives),
        unknown_loop_collectives=sum(1 for c in report.collectives if c.count_is_lower_bound),
        within_host_bytes=sum(c.bytes * c.count for c in report.collectives if not c.cross_host),
        cross_host_bytes=sum(c.bytes * c.count for c in report.collectives if c.cross_host),
        seconds=report.time.seconds if report.time else None, time=report.time,
        top_collectives=list(report.collectives[:3]),
        warnings=sum(1 for f in report.findings if f.severity.value == "warning"),
        errors=sum(1 for f in report.findings if f.severity.value == "error"),
    )


def failed_candidate(params: dict[str, Any], error: str) -> SweepCandidate:
    return SweepCandidate(label=params_label(params) or "(defaults)", params=params, target=None, error=error)


def _ties_by_traffic(ordered: list[SweepCandidate]) -> list[SweepCandidate]:
    """Runs of candidates whose times tie, each ordered by collective bytes, then peak. Times tie when they
    are written the same: a compute-bound CPU estimate gives 8x1 and 4x2 meshes the same 34.1 s though one
    moves 9.5 GiB per step and the other 3.0 GiB; times written apart are ordered by time, so "fastest first"
    never lists 2.72 s above 2.7 s (moe14 F8: a 1% tie did)."""
    runs: list[list[SweepCandidate]] = []
    for c in ordered:
        first = runs[-1][0] if runs else None
        if (first is not None and c.seconds is not None and first.seconds is not None
                and format_seconds(c.seconds) == format_seconds(first.seconds)):
            runs[-1].append(c)
        else:
            runs.append([c])
    return [c for run in runs for c in sorted(run, key=lambda x: (x.collective_bytes, x.peak_bytes or 0, x.label))]


def rank(candidates: list[SweepCandidate]) -> list[SweepCandidate]:
    """Those that fit (or have no budget) by time (ties, within 1%, by collective bytes), then peak; then those over the
    budget by peak; then the failures, in the order given."""
    ok = [c for c in candidates if c.error is None and c.fits is not False]
    over = [c for c in candidates if c.error is None and c.fits is False]
    failed = [c for c in candidates if c.error is not None]
    inf = float("inf")
    ok.sort(key=lambda c: (c.seconds if c.seconds is not None else inf, c.peak_bytes or 0, c.label))
    ok = _ties_by_traffic(ok)
    over.sort(key=lambda c: (c.peak_bytes or 0, c.label))
    best = next((c.seconds for c in ok if c.seconds), None)
    measured = [c for c in ok + over if c.seconds is not None and c.peak_bytes is not None]

    def dominated(c: SweepCandidate) -> bool:
        return any(o is not c and o.peak_bytes <= c.peak_bytes and o.seconds <= c.seconds
                   and (o.peak_bytes < c.peak_bytes or o.seconds < c.seconds) for o in measured)

    out = []
    for k, c in enumerate(ok):
        out.append(c.model_copy(update={
            "rank": k + 1, "slowdown": round(c.seconds / best, 4) if best and c.seconds is not None else None,
            "pareto": c in measured and not dominated(c)}))
    for c in over:
        out.append(c.model_copy(update={
            "slowdown": round(c.seconds / best, 4) if best and c.seconds is not None else None,
            "pareto": c in measured and not dominated(c)}))
    return out + failed
