"""The state fixes' one recommendation (fix_checks.py): SL201 and SL203 name the same values (a replicated
input that comes back sharded), and get one advice, the better of pinning the outputs back and giving the
inputs the layout the step returns them in."""

from __future__ import annotations

from ...passes.common.sharding_text import pspec_text
from ...passes.models.entry import RoundTrip
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding
from ...passes.pipelines.catalogue import STATE_ARGUMENT_FIXES, STATE_RULES
from .fix_verdicts import _cost_text, _not_offered
from .parameter_moves import listed
from .path_summary import summarized_paths


def one_advice_per_value(findings: list[Finding], moved: dict[str, RoundTrip]) -> list[Finding]:
    """SL201 on the state values an SL203 is about gives SL203's advice: one recommendation per value."""
    def inputs_of(f: Finding) -> frozenset[str]:
        return frozenset(rt.input.path for m in (f.ops or [f.subject or ""]) if (rt := moved.get(m)) is not None)

    advice = {inputs_of(f): f for f in findings if f.rule in STATE_ARGUMENT_FIXES and inputs_of(f)}
    out = [f.model_copy(update={"fix": a.fix, "fix_check": a.fix_check})
           if f.rule in STATE_RULES and f.rule not in STATE_ARGUMENT_FIXES
           and (a := advice.get(inputs_of(f))) is not None else f for f in findings]
    # A spec whose check was not measured better is not shown as the one to give (param: ... -> P(...)).
    return [f.model_copy(update={"suggested_sharding": None})
            if f.fix_check is not None and f.fix_check.verdict is not FixVerdict.better else f for f in out]


def state_advice(findings: list[Finding], pin: FixCheck, take: FixCheck, moved: dict[str, RoundTrip],
                  ) -> list[Finding]:
    """One recommendation for the state values the rules about state (SL201 and SL203) are about."""
    rank = {FixVerdict.better: 0, FixVerdict.rematerializes: 1, FixVerdict.no_change: 2, FixVerdict.trade_off: 3,
            FixVerdict.worse: 4, FixVerdict.failed: 5}

    def score(c: FixCheck) -> tuple[int, int]:
        return rank[c.verdict], (c.peak_delta + c.traffic_delta)

    best = min((pin, take), key=score)
    other = take if best is pin else pin
    # Both candidates change every state value that comes back on another layout at once: their figures are
    # for all of them together, printed once (on the first finding they cover), not as one finding's gain.
    together = len({rt.input.index for rt in moved.values()})
    first: str | None = None
    out = []
    for f in findings:
        if f.rule not in STATE_RULES:
            out.append(f)
            continue
        rt = moved.get(f.subject or "")
        if f.rule in STATE_ARGUMENT_FIXES and rt is None:
            out.append(f)  # a replicated input that comes back as it went: SL203's own advice stands
            continue
        if best.verdict is not FixVerdict.better:
            text = (f"neither fix is measured better for this step: pinning the outputs was tried, compiled and "
                    f"{_not_offered(pin)}; giving the inputs the returned layout {_not_offered(take)}")
            out.append(f.model_copy(update={"fix": text, "fix_check": best}))
            continue
        members = [moved.get(m) for m in (f.ops or [f.subject or ""])]
        layouts = {str(m.output.sharding) for m in members if m is not None}
        if best is take and rt is not None and None not in members and len(layouts) == 1:
            names = sorted({m.input.path for m in members if m is not None}, key=lambda p: (len(p), p))
            what = (f"shard {listed(names)} as {pspec_text(rt.output.sharding)}, the layout "
                    f"the step returns {'it' if len(set(names)) == 1 else 'them'} in")
        elif best is take:  # a group of values (SL201's small outputs): each takes its returned layout
            named = sorted({m.input.path for m in members if m is not None}, key=lambda p: (len(p), p))
            inputs = summarized_paths(named) if named else "the state inputs"
            what = (f"give {inputs} the layouts the step returns them in "
                    "(in_shardings=, or place them there with jax.device_put)")
        else:
            what = "pin the state outputs to their inputs' layouts (the target's suggested out_shardings=)"
        if first is None:
            first = f.subject or ""
            text = (f"{what} (checked with all {together} state values that come back on another layout changed "
                    f"at once, not this finding's alone: {_cost_text(best)}; the other way, "
                    f"{'pinning the outputs' if best is take else 'taking the returned layouts'}, "
                    f"{_cost_text(other)})")
        else:
            text = (f"{what} (checked with all {together} state values that come back on another layout changed "
                    f"at once; their figures are on the finding for {first})")
        out.append(f.model_copy(update={"fix": text, "fix_check": best}))
    return out
