"""A fix check's verdict and the words that print it: a candidate's figures against the program as
written, better only within the stated tolerance (fix_checks.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...passes.common.byte_sizes import format_bytes, format_signed_bytes
from ...passes.models.entry import EntrySignature
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, TargetReport
from ...passes.pipelines.catalogue import (
    MEASURED_RULES,
    REMATERIALIZATION_RULES,
    STATE_ARGUMENT_FIXES,
    STATE_RULES,
    TRAFFIC_RULES,
    measured_enough,
    stands_for_a_group_without_own_fix,
)
from ...passes.pipelines.entry import changed_roundtrips, state_roundtrips
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ..errors import ShardLintInputError

# Figures within this share of each other are the same (XLA's choices move a few buffers around):
# the tolerance a fix's other figure may grow by and still be offered as better.
_NOISE = 0.005
# A fix that lowers one figure may raise the other by this share of the peak as written, and by less than
# the first falls, and still be better (a table sharded to save 95 MiB that makes a 1 MiB all-reduce); one
# that saves 4 MiB of traffic for 12 MiB more peak is a trade-off (a new user's T5, issue 46).
_GROWTH = 0.01
TOLERANCE_TEXT = (f"figures within {_NOISE:.1%} count as unchanged; a fix that lowers one may raise the other by "
                  f"{_GROWTH:.0%} of the peak, and by less than the first falls")


def fix_verdict(peak: tuple[int, int], traffic: tuple[int, int], rematerialized: list[str] | None = None,
                ) -> FixVerdict:
    """The one rule a change is judged by (lint's fix checks, a fix on top of another, suggest's choice): its
    (before, after) peak and traffic, and the rematerializations XLA compiles it with that the program it is
    compared to lacks (``rematerialized``): one figure falls and the other grows within the stated tolerance,
    better; but a change XLA compiles with a new rematerialization is never better, whatever its figures."""
    verdict = _figures_verdict(peak, traffic)
    return FixVerdict.rematerializes if rematerialized and verdict is FixVerdict.better else verdict


def for_finding(f: Finding, check: FixCheck) -> FixCheck:
    """``check`` as the finding ``f`` judges it: a change measured better on the peak alone does not answer a
    finding about the traffic a step moves (TRAFFIC_RULES), whose collectives it leaves as they are; it is
    ``peak_only`` there, and said as tried, not printed as the fix (a new user's GNN: SL103's all-reduces
    answered by another weight's move for 1% of the peak, the all-reduces unchanged)."""
    if (check.verdict is FixVerdict.better and f.rule in TRAFFIC_RULES and check.traffic_bytes_after is not None
            and check.traffic_bytes_before is not None
            and check.traffic_bytes_before - check.traffic_bytes_after <= _NOISE * max(check.traffic_bytes_before, 1)):
        return check.model_copy(update={"verdict": FixVerdict.peak_only})
    return check


def _figures_verdict(peak: tuple[int, int], traffic: tuple[int, int]) -> FixVerdict:
    def change(before: int, after: int) -> int:
        if abs(after - before) <= _NOISE * max(before, 1):
            return 0
        return 1 if after > before else -1

    dp, dt = change(*peak), change(*traffic)
    # One figure falls, the other grows by no more than the stated tolerance, nor by more than the first fell:
    # better.
    allowed = _GROWTH * max(peak[0], 1)
    peak_fall, traffic_fall = peak[0] - peak[1], traffic[0] - traffic[1]
    if (dp < 0 < dt and -traffic_fall <= min(allowed, peak_fall)
            or dt < 0 < dp and -peak_fall <= min(allowed, traffic_fall)):
        return FixVerdict.better
    if dp == dt == 0:
        return FixVerdict.no_change
    if dp <= 0 and dt <= 0:
        return FixVerdict.better
    if dp >= 0 and dt >= 0:
        return FixVerdict.worse
    return FixVerdict.trade_off


def relative_gain(peak: tuple[int, int], traffic: tuple[int, int]) -> tuple[float, float]:
    """How two changes both measured better are ranked, the step-time estimate being the same (suggest's
    ``advice.verdict.best_version`` and lint's stated-layout fixes): the larger share of its figure as written
    that a change saves (peak or traffic, each against its own value before), then the other share (a rise
    counts as a negative share), each within [-1, 1]. Bytes are not compared across figures: halving the
    traffic (-50%) beats a peak 2% lower, however many more bytes the peak holds."""
    shares = sorted((max(-1.0, min(1.0, (before - after) / max(before, 1))) for before, after in (peak, traffic)),
                    reverse=True)
    return shares[0], shares[1]


def check_gain(check: FixCheck) -> tuple[float, float]:
    """``relative_gain`` of a compiled fix check's figures against the program as written."""
    return relative_gain((check.peak_bytes_before or 0, check.peak_bytes_after or 0),
                         (check.traffic_bytes_before or 0, check.traffic_bytes_after or 0))


def traffic_bytes(report: TargetReport, sig: EntrySignature) -> int:
    """Per-device bytes a step moves: its collectives, and the state outputs the next step reshards."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    moved = changed_roundtrips(state_roundtrips(compiled, FIX_CHECKS), FIX_CHECKS)
    entry = sum(rt.output.per_device_bytes for rt in moved)
    return report.collective_bytes + entry


def baseline(report: TargetReport, sig: EntrySignature) -> tuple[int, int, int]:
    """The program as written's figures a fix check compares against: its peak, its traffic and, within that,
    its collectives' bytes per step (``TargetReport.collective_bytes``, what rewrite prints)."""
    return (report.memory.peak_bytes if report.memory else 0, traffic_bytes(report, sig), report.collective_bytes)


def measured_check(change: str, after: TargetReport | BaseException, base: tuple[int, int, int | None],
                   sig: EntrySignature, written: frozenset[str] = frozenset()) -> FixCheck:
    """A candidate's compile (its report, or what it raised) against the program as written (``base``: its
    peak, traffic and collective bytes, ``baseline``; ``written``: its rematerializations,
    ``rematerializations``): a program XLA rejects is a failed check; anything else raised is our bug. A
    candidate XLA compiles with a rematerialization the program as written lacks is never better, whatever
    its figures."""
    if isinstance(after, ShardLintInputError):
        return FixCheck(change=change, verdict=FixVerdict.failed, peak_bytes_before=base[0],
                        traffic_bytes_before=base[1], collective_bytes_before=base[2],
                        error=str(after).split(": ", 1)[-1][:300])
    if isinstance(after, BaseException):
        raise after
    peak = after.memory.peak_bytes if after.memory else 0
    traffic = traffic_bytes(after, sig)
    new = new_rematerializations(after, written)
    return FixCheck(change=change, verdict=fix_verdict((base[0], peak), (base[1], traffic), new),
                    peak_bytes_before=base[0], peak_bytes_after=peak, traffic_bytes_before=base[1],
                    traffic_bytes_after=traffic, collective_bytes_before=base[2],
                    collective_bytes_after=after.collective_bytes if base[2] is not None else None,
                    rematerialized=new)


def on_top_of(first: FixCheck, both: FixCheck) -> FixCheck:
    """``both`` (a fix compiled together with ``first``) measured against ``first`` alone: what the second
    change adds once the first is made, judged by the same rule."""
    verdict = FixVerdict.failed if both.verdict is FixVerdict.failed else fix_verdict(
        (first.peak_bytes_after or 0, both.peak_bytes_after or 0),
        (first.traffic_bytes_after or 0, both.traffic_bytes_after or 0), both.rematerialized)
    return both.model_copy(update={
        "peak_bytes_before": first.peak_bytes_after, "traffic_bytes_before": first.traffic_bytes_after,
        "collective_bytes_before": first.collective_bytes_after, "verdict": verdict})


def rematerializations(report: TargetReport) -> frozenset[str]:
    """What XLA replicates in full to compile the program (SL104's findings, a fix candidate's too: its
    report keeps them, lint.py's analyze_target), and every value a collective of it replicates whole on
    every device (``_whole``): what another program's ``new_rematerializations`` are told apart from."""
    return frozenset([f.message for f in report.findings if f.rule in REMATERIALIZATION_RULES]
                     + [_whole(f"{c.dtype}[{','.join(map(str, c.shape))}]") for c in report.collectives
                        if c.kind in _REPLICATING])


def new_rematerializations(report: TargetReport, written: frozenset[str]) -> list[str]:
    """SL104's findings of ``report`` that the program as written (``written``: its ``rematerializations``)
    lacks. A value the written program replicates whole on every device too (a collective's result of the
    same type and shape) is not new, whatever SL104 says of it: a diffrax solve all-reduces its saved solution
    whole on every device with its out_shardings pinned as without (issue 46, cfd14: the pin, measured better
    on every figure, was withheld as "XLA rematerializes with it"); only with the pin does a layout ask for
    it, so only there is it SL104's."""
    return sorted(f.message for f in report.findings if f.rule in REMATERIALIZATION_RULES
                  and f.message not in written
                  and not (f.rematerialized_value is not None and _whole(str(f.rematerialized_value)) in written))


# The collectives whose result is a value whole on every device of their group (the value SL104's finding
# names in its rematerialized_value is told apart from theirs by type and shape).
_REPLICATING = frozenset({"all-gather", "all-reduce"})


def _whole(value: str) -> str:
    return f"{value} replicated by a collective"


def cost_text(check: FixCheck) -> str:
    if check.verdict is FixVerdict.failed:
        return f"does not compile ({check.error})"

    collectives = check.collective_delta
    if collectives is None or collectives == check.traffic_delta:
        return (f"peak {format_signed_bytes(check.peak_delta)}, traffic {format_signed_bytes(check.traffic_delta)} "
                "per step per device")
    # The fix changes what the next step reshards on entry (the state pinned, or given its returned layout):
    # the collectives are printed as rewrite and XLA count them, and the entry reshards beside them, so the
    # traffic the verdict weighs is their sum, not a figure of its own (a new user's ViT, issue 46).
    entry = check.traffic_delta - collectives
    return (f"peak {format_signed_bytes(check.peak_delta)}, collectives {format_signed_bytes(collectives)} per step "
            f"per device and {format_bytes(abs(entry))} {'less' if entry < 0 else 'more'} resharded on entry by the "
            f"next step (traffic {format_signed_bytes(check.traffic_delta)})")


def rematerialized_text(rematerialized: list[str]) -> str:
    """XLA's rematerialization a layout brings, in SL104's words (the first, and how many more): lint's fix
    checks and suggest's versions say it alike."""
    first = rematerialized[0].split(" and slices it again")[0]
    more = f"; and {len(rematerialized) - 1} more" if len(rematerialized) > 1 else ""
    return f"XLA rematerializes with it, which the step as written does not make it do (SL104: {first}{more})"


def not_offered_text(check: FixCheck) -> str:
    """What a fix that was compiled and is not offered was measured to do."""
    if check.verdict is FixVerdict.failed:
        return cost_text(check)
    if check.verdict is FixVerdict.rematerializes:
        return f"measured {cost_text(check)}, but {rematerialized_text(check.rematerialized)}, so it is not offered"
    if check.rematerialized:
        without = not_offered_text(check.model_copy(update={"rematerialized": []}))
        return f"{without}; {rematerialized_text(check.rematerialized)}"
    if check.verdict is FixVerdict.no_change:
        return f"measured no change ({cost_text(check)}; {TOLERANCE_TEXT})"
    if check.verdict is FixVerdict.peak_only:
        return f"measured {cost_text(check)}: it lowers the peak but not this finding's traffic, so it is not its fix"
    if check.verdict is FixVerdict.trade_off:
        return f"measured a trade-off, not an improvement ({cost_text(check)}; {TOLERANCE_TEXT})"
    return f"costs {cost_text(check)}"


def unchecked_text(change: str, limit: int) -> str:
    """A finding's fix that was not compiled (the fix checks' budget spent on the findings before it): not
    offered, and the finding says what was not tried, since every fix printed is checked."""
    return (f"no fix is offered: {change} was not compiled (lint checks at most {limit} sharding fixes per target, "
            "spent on the findings above), so it is not printed as the fix")


def judged_text(check: FixCheck) -> str:
    """A check's figures and what they count as: a few KiB off a GiB peak reads as a saving, and is within
    the noise (a new user's T5, issue 46)."""
    if check.verdict is FixVerdict.no_change:
        return f"{cost_text(check)}, within {_NOISE:.1%} of the step as written: no change"
    if check.verdict is FixVerdict.peak_only:
        return f"{cost_text(check)}, the peak only: not this finding's traffic"
    if check.verdict in (FixVerdict.trade_off, FixVerdict.worse):
        return f"{cost_text(check)}, {'a trade-off' if check.verdict is FixVerdict.trade_off else 'worse'}"
    return cost_text(check)


def without_unfixable_small_outputs(findings: list[Finding], pinned: FixCheck, taken: FixCheck,
                                    ) -> tuple[list[Finding], list[str]]:
    """SL201's one finding for many small outputs (biases, norm scales, their moments) is dropped when neither
    state fix measured better (nothing to act on), and said in a line with what both fixes measured."""
    dropped = [f for f in findings if stands_for_a_group_without_own_fix(f)
               and pinned.verdict is not FixVerdict.better and taken.verdict is not FixVerdict.better]
    notes = [f"{f.count} small outputs come back on another layout than their inputs ({format_bytes(f.bytes or 0)} "
             "per device in all): not reported, as neither pinning them nor giving the inputs the returned layout "
             f"is measured better (pinning: {judged_text(pinned)}; the returned layout: {judged_text(taken)})"
             for f in dropped]
    return [f for f in findings if f not in dropped], notes


def pin_not_offered(pinned: FixCheck, notes: list[str], findings: list[Finding]) -> list[str]:
    """The line saying the out_shardings= pin was compiled and is withheld, unless the small-outputs line
    already gives its figures (no SL201 finding is left for the pin to be about)."""
    if notes and not any(f.rule in STATE_RULES and f.rule not in STATE_ARGUMENT_FIXES for f in findings):
        return []
    return ["the out_shardings= pinning every state output was compiled and is not offered: "
            f"{not_offered_text(pinned)}"]


def with_check(f: Finding, check: FixCheck, fix: str) -> Finding:
    """A fix is printed as the fix only when its compile measured it better: less traffic or a lower
    peak, the other not worse beyond the tolerance. Otherwise the finding says what was tried."""
    if check.verdict is FixVerdict.better:
        return f.model_copy(update={"fix_check": check, "fix": f"{fix} (checked: {cost_text(check)})"})
    return f.model_copy(update={
        "fix_check": check, "suggested_sharding": None,
        "fix": f"no sharding change found that helps: {check.change} was tried, compiled and "
               f"{not_offered_text(check)}"})


def without_fixes_not_measured_better(report: TargetReport, options: dict[str, Any]) -> TargetReport:
    """The report without the findings that stand only where their own fix is measured to do enough
    (MEASURED_RULES: SL208's small argument gathered whole, whose peak only its compile replicated measures)
    whose fix was compiled and does not (``options``: the resolved thresholds): nothing to act on. Each is said
    in one line with what was measured."""
    dropped = [f for f in report.findings if f.rule in MEASURED_RULES and f.fix_check is not None
               and f.fix_check.verdict is not FixVerdict.failed and not measured_enough(f, options)]
    if not dropped:
        return report
    notes = [f"{f.rule} not reported: {f.message}; {f.fix_check.change} was compiled and measured "
             f"{cost_text(f.fix_check)}, not the share of the peak the rule asks for"
             for f in dropped if f.fix_check is not None]
    return report.model_copy(update={"findings": [f for f in report.findings if f not in dropped],
                                     "warnings": [*report.warnings, *notes]})
