"""The state fixes' one recommendation (fix_checks.py): SL201 and SL203 name the same values (a replicated
input that comes back sharded), and get one advice, the better of pinning the outputs back and giving the
inputs the layout the step returns them in."""

from __future__ import annotations

from ...passes.common.sharding_text import pspec_text
from ...passes.models.entry import RoundTrip
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding
from ...passes.pipelines.catalogue import PARAMETER_FIXES, STATE_ARGUMENT_FIXES, STATE_RULES
from .fix_verdicts import cost_text, not_offered_text
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


def _score(c: FixCheck) -> tuple[int, int]:
    return _RANK[c.verdict], c.peak_delta + c.traffic_delta



_RANK = {FixVerdict.better: 0, FixVerdict.rematerializes: 1, FixVerdict.peak_only: 2, FixVerdict.no_change: 2,
         FixVerdict.trade_off: 3, FixVerdict.worse: 4, FixVerdict.failed: 5}


def better_move_of(f: Finding, state_check: FixCheck | None, findings: list[Finding],
                   moved: dict[str, RoundTrip]) -> Finding | None:
    """The finding whose fix moves a state value ``f`` (a rule about state) is about, measured better than
    the state fix ``f`` gives (``state_check``): SL103's tied decoder on the dimension it produces, with its
    optimizer state. None where there is none, or ``f`` is no rule about state."""
    if f.rule not in STATE_RULES:
        return None
    names = {rt.input.path for m in (f.ops or [f.subject or ""]) if (rt := moved.get(m)) is not None}
    move = next((g for g in findings if g.rule in PARAMETER_FIXES and g.rule not in STATE_RULES
                 and g.parameter in names and g.fix_check is not None
                 and g.fix_check.verdict is FixVerdict.better and g.suggested_sharding is not None), None)
    if move is None or move.fix_check is None or (state_check is not None and _score(state_check) <= _score(
            move.fix_check)):
        return None
    return move


def better_moves_of_state(findings: list[Finding], moved: dict[str, RoundTrip]) -> list[Finding]:
    """A state value a state fix covers (SL201: take the layout the step returns it in, or pin it back) that
    another finding's fix moves, measured better (``better_move_of``): the state finding gives that move, so
    lint names one layout per value, the better measured, as suggest's single move of it does (issue #46:
    P(None, 'model') printed beside P('model')). The state fix's own figures stay on the finding
    ``state_advice`` gave them to, one this leaves alone."""
    together = len({rt.input.index for rt in moved.values()})
    out = []
    for f in findings:
        move = better_move_of(f, f.fix_check, findings, moved)
        if move is None:
            out.append(f)
            continue
        state = "not measured" if f.fix_check is None else (
            f"which changes all {together} state values that come back on another layout at once, measured "
            f"{cost_text(f.fix_check)}")
        out.append(f.model_copy(update={"fix_check": move.fix_check, "fix": (
            f"{move.rule}'s fix for {move.parameter}, measured better than the state fix for it ({state}): "
            f"{move.fix}")}))
    return out


def moves_printed_for_state(findings: list[Finding]) -> list[str]:
    """The changes of the moves ``better_moves_of_state`` prints for state values in place of the state fix
    (each once, in the findings' order): what a user makes for those values instead of it."""
    moves = {f.fix_check.change: None for f in findings if f.rule in PARAMETER_FIXES and f.rule not in STATE_RULES
             and f.fix_check is not None and f.fix_check.verdict is FixVerdict.better}
    return list(dict.fromkeys(f.fix_check.change for f in findings if f.rule in STATE_RULES
                              and f.fix_check is not None and f.fix_check.change in moves))


def better_state_fix(pin: FixCheck, take: FixCheck) -> FixCheck:
    """The state fix the findings recommend (``state_advice``): the better verdict, then the larger gain."""
    return min((pin, take), key=_score)


def state_advice(findings: list[Finding], pin: FixCheck, take: FixCheck, moved: dict[str, RoundTrip],
                  ) -> list[Finding]:
    """One recommendation for the state values the rules about state (SL201 and SL203) are about."""
    best = better_state_fix(pin, take)
    other = take if best is pin else pin
    # Both candidates change every state value that comes back on another layout at once: their figures are
    # for all of them together, printed once (on the first finding they cover), not as one finding's gain.
    together = len({rt.input.index for rt in moved.values()})
    # The figures go on one finding, the others name it: an SL203 about a moved value where there is one, as
    # one_advice_per_value gives its text to the SL201 on the same value (an SL201 holding them would lose them).
    # Not one whose value another finding's better move is printed for (better_moves_of_state): that finding
    # prints the move, and the figures would be lost with the state fix's text (a new user's BERT, issue 46:
    # 66 small outputs pointed at the embedding's finding, which printed SL103's move).
    state = [f for f in findings if f.rule in STATE_RULES
             and not (f.rule in STATE_ARGUMENT_FIXES and moved.get(f.subject or "") is None)]
    kept = [f for f in state if better_move_of(f, best, findings, moved) is None] or state
    lead = next((f for f in kept if f.rule in STATE_ARGUMENT_FIXES), kept[0] if kept else None)
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
                    f"{not_offered_text(pin)}; giving the inputs the returned layout {not_offered_text(take)}")
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
        if f is lead:
            text = (f"{what} (checked with all {together} state values that come back on another layout changed "
                    f"at once, not this finding's alone: {cost_text(best)}; the other way, "
                    f"{'pinning the outputs' if best is take else 'taking the returned layouts'}, "
                    f"{cost_text(other)})")
        else:
            text = (f"{what} (checked with all {together} state values that come back on another layout changed "
                    f"at once; their figures are on the finding for {lead.subject if lead else ''})")
        out.append(f.model_copy(update={"fix": text, "fix_check": best}))
    return out
