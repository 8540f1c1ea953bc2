"""A compiled version's figures, which version ``suggest`` suggests (lint's and check's solver fixes
choose by the same rule), and the one line that says why."""

from __future__ import annotations

from dataclasses import dataclass

from ....passes.common.byte_sizes import format_bytes
from ....passes.common.durations import format_seconds
from ....passes.models.fix_check import FixVerdict
from ....passes.models.report import TargetReport
from ....passes.models.suggest import Version
from ....passes.pipelines.rewrite import program_figures
from ...context.config import Settings
from ..fix_verdicts import fix_verdict, new_rematerializations, relative_gain, rematerialized_text

# Estimated times this close are one time: the estimate is a model of the compiled
# program, not a measurement, and a 1% edge is not worth a tenth more memory.
SAME_TIME = 0.01
LESS_MEMORY = 0.9
# Estimated step times this close are noise too when a version wins on both other figures: the
# estimate models the compiled program (on CPU, a CPU's), while a lower peak and less collective
# traffic are counted from it. Within 5%, strictly lower on both wins.
NEAR_TIME = 0.05


@dataclass(frozen=True)
class VersionText:
    name: str
    description: str
    text: str


def measured_version(v: VersionText, report: TargetReport | None, error: str | None,
                     settings: Settings) -> tuple[Version, TargetReport | None]:
    """The version's figures from its compiled report (its error where none came back)."""
    if report is None:
        return Version(name=v.name, description=v.description, peak_bytes=None, fits=None, collective_bytes=None,
                       collective_count=None, estimated_seconds=None, error=error or "no report"), None
    facts = program_figures(report)
    budget = settings.budget_bytes
    return Version(
        name=v.name, description=v.description, peak_bytes=facts.peak_bytes,
        fits=None if budget is None else facts.peak_bytes <= budget, collective_bytes=facts.collective_bytes,
        collective_count=sum(c.count for c in facts.collectives),
        estimated_seconds=facts.time.seconds if facts.time else None,
    ), report


def _seconds(v: Version) -> float:
    """A compiled version's estimated time (only versions with one are compared)."""
    assert v.estimated_seconds is not None, v.name
    return v.estimated_seconds


def same_time_within(seconds: float, resolution_s: float) -> float:
    """How much slower than ``seconds`` is still the same time: 1% of it, or the model's resolution."""
    return max(seconds * SAME_TIME, resolution_s)


def _figures(written: Version, v: Version) -> tuple[tuple[int, int], tuple[int, int]]:
    return (written.peak_bytes or 0, v.peak_bytes or 0), (written.collective_bytes or 0, v.collective_bytes or 0)


def _measured_better(written: Version, v: Version) -> bool:
    return fix_verdict(*_figures(written, v), v.rematerialized) is FixVerdict.better


def best_version(versions: list[Version], resolution_s: float = 0.0, reference: Version | None = None,
                 ) -> Version | None:
    """The fastest compiled version that fits; but where versions the same time are measured better than the
    written shardings (``reference``, else the version named written: ``fix_verdicts.fix_verdict``), the one
    with the largest relative gain (``fix_verdicts.relative_gain``: the larger share of its peak or traffic
    saved, then the other share); else, where one the same time (within 1% of its time
    or ``resolution_s``, ``time_resolution``) has a peak at least 10% lower, that one (the lowest
    such peak): a replicated table spread over all 8 devices, 4x less memory for one more small
    collective, is chosen as lint's SL203 fix chooses it. The written shardings compete too: when
    nothing beats them, the suggestion is to keep them (and on a tie they win, a change being worth
    making only for a gain)."""
    ok = [v for v in versions if not v.error and v.estimated_seconds is not None and v.fits is not False]
    if not ok:
        return None

    def preference(v: Version) -> tuple[bool, bool]:
        return v.name != "written", v.name != "solver"

    fastest = min(ok, key=lambda v: (_seconds(v), v.peak_bytes or 0, *preference(v)))
    tie = _seconds(fastest) + same_time_within(_seconds(fastest), resolution_s)
    # Among the versions the same time, those measured better than the written shardings (as lint's fix check
    # measures a fix) are ranked by their relative gain, not by bytes: the MoE's expert weights moved to their
    # expert dimension halve the traffic at an equal peak, which a layout 14% lower in peak for 1.6% less traffic
    # does not beat (moe14's vmoe step).
    base = reference or next((v for v in ok if v.name == "written"), None)
    gains = [v for v in ok if base is not None and v is not base and _seconds(v) <= tie
             and base.estimated_seconds is not None and _measured_better(base, v)]
    if base is not None and gains:
        chosen = max(gains, key=lambda v: (relative_gain(*_figures(base, v)), -(v.peak_bytes or 0),
                                           not preference(v)[0], not preference(v)[1]))
        return lower_on_both_near_in_time(ok, chosen, resolution_s) or chosen
    leaner = [v for v in ok if _seconds(v) <= tie
              and (v.peak_bytes or 0) <= (fastest.peak_bytes or 0) * LESS_MEMORY]
    chosen = min(leaner, key=lambda v: (v.peak_bytes or 0, *preference(v))) if leaner else fastest
    # The written shardings the same time as the fastest are kept unless the faster one is measured better than
    # them as lint's fix check measures a fix: a faster estimate inside the tie is no gain, and a version
    # chosen on it alone could be a trade-off lint refuses (newcomer13's BERT: its intermediate kernel moved,
    # 673.0 vs 673.4 ms, peak -640 KiB, traffic +512 KiB).
    written = next((v for v in ok if v.name == "written" and _seconds(v) <= tie), None)
    if not leaner and written is not None and chosen is not written and fix_verdict(
            (written.peak_bytes or 0, chosen.peak_bytes or 0),
            (written.collective_bytes or 0, chosen.collective_bytes or 0)) is not FixVerdict.better:
        chosen = written
    return lower_on_both_near_in_time(ok, chosen, resolution_s) or chosen


def with_rematerializations(version: Version, report: TargetReport | None, written: frozenset[str]) -> Version:
    """The version with what XLA replicates in full to compile it that the program as written (``written``: its
    ``rematerializations``) does not make it do: what lint's fix check of the same program reads
    (``fix_verdicts.measured_check``)."""
    new = new_rematerializations(report, written) if report is not None else []
    return version.model_copy(update={"rematerialized": new}) if new else version


def advised_version(versions: list[Version], resolution_s: float = 0.0, reference: Version | None = None,
                    ) -> Version | None:
    """The version suggest suggests and lint's and check's solver fixes offer: ``best_version``'s choice
    among those XLA compiles without a new rematerialization (``with_rematerializations``), as a fix check
    never finds one that has one better (``FixVerdict.rematerializes``); among all only where none of those
    compiled within the budget."""
    clean = best_version([v for v in versions if not v.rematerialized], resolution_s, reference)
    return clean if clean is not None else best_version(versions, resolution_s, reference)


def lower_on_both_near_in_time(ok: list[Version], chosen: Version, resolution_s: float = 0.0) -> Version | None:
    """The rule: among the compiled versions that fit, one whose estimated time is within NEAR_TIME (5%)
    of the chosen one's (or the model's resolution) and whose peak AND collective bytes are both strictly
    lower than the chosen one's replaces it (the lowest peak of such, then the least traffic); None where
    none is. On the Llama with q_proj on its contracted dim the written shardings estimated 353 ms, the
    fsdp baseline 362 ms (2.5% slower) with a peak 183.4 vs 206.7 MiB and 49.6 vs 85.8 MiB of collectives:
    the fsdp one is the suggestion."""
    near = _seconds(chosen) + max(_seconds(chosen) * NEAR_TIME, resolution_s)
    better = [v for v in ok if v is not chosen and _seconds(v) <= near
              and v.peak_bytes is not None and chosen.peak_bytes is not None and v.peak_bytes < chosen.peak_bytes
              and v.collective_bytes is not None and chosen.collective_bytes is not None
              and v.collective_bytes < chosen.collective_bytes]
    return min(better, key=lambda v: (v.peak_bytes or 0, v.collective_bytes or 0, v.name)) if better else None



def _within(seconds: float, resolution_s: float) -> str:
    return "within 1%" if seconds * SAME_TIME >= resolution_s else \
        f"within {format_seconds(resolution_s)}, the estimate's resolution"


def verdict(versions: list[Version], best: Version, budget: int | None, resolution_s: float = 0.0) -> str:
    by = {v.name: v for v in versions}
    w, solver = by.get("written"), by["solver"]
    keep = best.name == "written"
    text = ("suggested: keep the written shardings" if keep else f"suggested: the {best.name} shardings") \
        + f", peak {format_bytes(best.peak_bytes or 0)}"
    if budget is not None:
        text += f" (fits {format_bytes(budget)})"
    text += f", estimated {format_seconds(_seconds(best))} per step"
    # A version XLA rematerializes with is compared only where one was chosen (advised_version): said apart.
    others = [v for v in versions if v.name != "written" and v.estimated_seconds and not v.error
              and v.fits is not False and (best.rematerialized or not v.rematerialized)]
    if keep:
        runner = min(others, key=_seconds, default=None)
        text += ": nothing compiled faster" + (" without a new rematerialization" if any(
            v.rematerialized for v in versions) else "") + (
            f" (the closest, {runner.name}, {_seconds(runner) / _seconds(best):.2f}x this time)"
            if runner is not None else "")
    elif w is not None and not w.error and w.estimated_seconds:
        ratio = _seconds(best) / _seconds(w)
        text += f", {ratio:.2f}x the written shardings' {format_seconds(w.estimated_seconds)}"
    fastest = min(others, key=_seconds, default=best)
    quickest = min([*others, *([w] if w is not None and w.estimated_seconds and not w.error
                                and w.fits is not False else [])], key=_seconds, default=best)
    if _seconds(best) > _seconds(quickest) + same_time_within(_seconds(quickest), resolution_s):
        # Chosen by lower_on_both_near_in_time: say the rule and the figures it compared.
        text += (f"; the {'written shardings' if quickest.name == 'written' else quickest.name + ' version'} "
                 f"estimated {format_seconds(_seconds(quickest))}, {_seconds(quickest) / _seconds(best):.3f}x "
                 f"this time, within {NEAR_TIME:.0%} (estimates that close are noise) while this one is lower on "
                 f"both peak ({format_bytes(best.peak_bytes or 0)} vs {format_bytes(quickest.peak_bytes or 0)}) "
                 f"and collective traffic ({format_bytes(best.collective_bytes or 0)} vs "
                 f"{format_bytes(quickest.collective_bytes or 0)})")
    elif not keep and fastest is not best:
        text += (f"; the {fastest.name} version is {_seconds(fastest) / _seconds(best):.3f}x "
                 f"this time ({_within(_seconds(fastest), resolution_s)}) with a peak "
                 f"{(fastest.peak_bytes or 0) / (best.peak_bytes or 1):.2f}x "
                 f"this one ({format_bytes(fastest.peak_bytes or 0)})")
    passed = best_version(versions, resolution_s)  # the choice were rematerializations not ranked apart
    if passed is not None and passed is not best and passed.rematerialized:
        text += (f"; the {passed.name} version (estimated {format_seconds(_seconds(passed))}, peak "
                 f"{format_bytes(passed.peak_bytes or 0)}) is not suggested: "
                 f"{rematerialized_text(passed.rematerialized)}")
    if solver.rematerialized and not best.rematerialized:
        if passed is not solver:
            text += f"; the solver's own choice is not suggested: {rematerialized_text(solver.rematerialized)}"
    elif best.name != "solver" and fastest.name != "solver":
        tied = (not solver.error and solver.fits is not False and solver.estimated_seconds is not None
                and solver.estimated_seconds <= _seconds(best)
                + same_time_within(_seconds(best), resolution_s))
        if tied:
            text += (f"; the solver's own choice is {_within(_seconds(best), resolution_s)} "
                     f"({format_seconds(_seconds(solver))}, peak {format_bytes(solver.peak_bytes or 0)})")
        else:
            detail = solver.error or (format_seconds(solver.estimated_seconds)
                                      if solver.estimated_seconds is not None else "no time estimate") + (
                ", over the budget" if solver.fits is False else "")
            text += f"; the solver's own choice compiled slower ({detail})"
    return text
