"""SL202's fix, a jit option (``donate_argnums``) rather than a sharding, compiled like the others
(fix_checks.py): each argument SL202 names donated by itself, all of them together, and on top of the state
fix SL201/SL203 print where donating alone measured nothing."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from ...passes.common.pytree_paths import argument_name
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, TensorInfo
from ...passes.pipelines.catalogue import DONATION_FIXES
from .fix_verdicts import cost_text, not_offered_text, on_top_of


def donors_of(f: Finding, inputs: list[TensorInfo]) -> frozenset[int]:
    """The inputs SL202's finding would donate: every array of the argument it names not donated yet."""
    return frozenset(t.index for t in inputs if not t.donated and argument_name(t.path) == f.subject)


def donation_checked(f: Finding, check: FixCheck) -> Finding:
    """SL202 with its donation compiled: the fix printed with what it measured, or what was tried."""
    if check.verdict is FixVerdict.better:
        return f.model_copy(update={"fix_check": check, "fix": f"{f.fix} (checked: {cost_text(check)})"})
    return f.model_copy(update={"fix_check": check,
                                "fix": f"{f.fix} was tried, compiled and {not_offered_text(check)}"})


def joint_donation(donor_sets: list[frozenset[int]],
                   input_keys: tuple[tuple, ...]) -> tuple[str, frozenset[int]] | None:
    """Where SL202 names several arguments, the fix that donates them all in one jit, and its inputs
    (``input_keys``: each input's key path, its argument first): XLA's buffer assignment of the joint donation
    is not the sum of the singles' (on a Llama step donating the optimizer state alone raised the peak, both
    together lowered it most), so it is compiled as one more candidate. None where there is one argument."""
    donors = frozenset().union(*donor_sets)
    arguments = sorted({input_keys[i][0] for i in donors})
    if len(arguments) < 2:
        return None
    return f"jax.jit(..., donate_argnums=({', '.join(map(str, arguments))}))", donors


def one_donation_advice(findings: list[Finding], joint: FixCheck) -> list[Finding]:
    """SL202's findings with one recommendation: the joint donation, where its compile measured it better and
    no argument's donation alone measured lower (peak, then traffic), as one finding naming every argument it
    donates; otherwise each finding keeps its own donation's outcome, and one whose donation alone is not
    better says what the joint one measured."""
    singles = [f.fix_check for f in findings if f.rule in DONATION_FIXES and f.fix_check is not None]

    def score(c: FixCheck) -> tuple[int, int]:
        return (c.peak_bytes_after or 0, c.traffic_bytes_after or 0)

    better = [c for c in singles if c.verdict is FixVerdict.better]
    joint_best = joint.verdict is FixVerdict.better and all(score(joint) <= score(c) for c in better)
    answered = [f for f in findings if f.rule in DONATION_FIXES and f.fix_check is not None]
    if joint_best and answered:
        merged = _joint_finding(answered, joint)
        return [merged if f is answered[0] else f for f in findings if f is answered[0] or f not in answered]
    out = []
    for f in findings:
        if f.rule in DONATION_FIXES and f.fix_check is not None and f.fix_check.verdict is not FixVerdict.better:
            joint_text = (f"measured {cost_text(joint)}, less than another argument's donation alone"
                          if joint.verdict is FixVerdict.better else not_offered_text(joint))
            out.append(f.model_copy(update={"fix": f"{f.fix}; {joint.change} was tried too, compiled and "
                                                   f"{joint_text}"}))
        else:
            out.append(f)
    return out


def _joint_finding(answered: list[Finding], joint: FixCheck) -> Finding:
    """The findings the joint donation answers as one: one change at one line (the jit call), so one finding
    (and one SARIF result) naming every argument, with the figure measured once for them all; two findings
    printing the same "peak -36.3 MiB" read as twice that (a new user's T5 and ViT, issue 46)."""
    # In the order of the jit's arguments: each single's change names its argument's number.
    ordered = sorted(answered, key=lambda f: [int(n) for n in re.findall(
        r"\d+", f.fix_check.change if f.fix_check else "")])
    subjects = [f.subject or "" for f in ordered]
    together = f" for {', '.join(subjects[:-1])} and {subjects[-1]} together" if len(subjects) > 1 else ""
    alone = "".join(f"; {f.fix_check.change} alone was tried and {not_offered_text(f.fix_check)}" for f in ordered
                    if f.fix_check is not None and f.fix_check.verdict is not FixVerdict.better)
    messages = [f.message for f in ordered]
    message = messages[0] if len(messages) == 1 else f"{'; '.join(messages[:-1])}; and {messages[-1]}"
    return ordered[0].model_copy(update={
        "message": message, "fix_check": joint,
        "fix": f"{joint.change} (checked: {cost_text(joint)}{together}){alone}"})


def donation_after_state_fix(findings: list[Finding], combined: FixCheck, donation: str,
                             state_fix: str, them: bool = False) -> list[Finding]:
    """SL202's findings where no donation alone measured better but the donation on top of the fixes printed for
    the state did (``combined``, measured against the program with those fixes, ``state_fix``: what they are
    and what they measured, ``them``: more than one fix): one finding, the donation to make with them. XLA
    reuses a donated buffer only for an output of the same shape on the same layout, and a step that returns
    its state on other layouts has none (newcomer13's BERT: donation alone -1.2 MiB, no change; after giving
    the inputs the returned layouts, -29.8 MiB more). Unchanged where it measured no better."""
    answered = [f for f in findings if f.rule in DONATION_FIXES and f.fix_check is not None]
    if not answered or combined.verdict is not FixVerdict.better or any(
            f.fix_check is not None and f.fix_check.verdict is FixVerdict.better for f in answered):
        return findings
    first = answered[0]
    subjects = [f.subject or "" for f in answered]
    named = subjects[0] if len(subjects) == 1 else f"{', '.join(subjects[:-1])} and {subjects[-1]}"
    fix = (f"{donation} once {state_fix}: measured on top of {'them' if them else 'it'}, "
           f"{cost_text(combined)}. Donated alone, {named} measured no change: XLA reuses a donated "
           "buffer only for an output on the same layout, and this step returns its state on other layouts")
    merged = first.model_copy(update={"message": "; ".join(dict.fromkeys(f.message for f in answered)),
                                      "fix_check": combined, "fix": fix})
    return [merged if f is first else f for f in findings if f is first or f not in answered]


def donation_on_top(findings: list[Finding], state: tuple[Any, FixCheck], donations: dict,
                     run: Callable[[Any], FixCheck], input_keys: tuple[tuple, ...],
                     moves: Sequence[Any] = ()) -> list[Finding]:
    """Where the printed state fix is better and no donation alone was, the donations compiled on top of what
    the findings print for the state and measured against it (donation_fixes.donation_after_state_fix): the
    state fix (``state``: its candidate and check), and where another finding's move is printed for some of
    its values instead (``moves``: their candidates, state_advice.better_moves_of_state), those moves with the
    state fix for the values they leave, compiled once more to measure the donation against (a new user's
    BERT, issue 46: SL103's P('model') for the embedding and the returned layouts for the 66 small outputs)."""
    candidate, check = state
    if check.verdict is not FixVerdict.better or not donations or any(
            f.fix_check is not None and f.fix_check.verdict is FixVerdict.better
            for f in findings if f.rule in DONATION_FIXES):
        return findings
    donors = frozenset().union(*(c.donors for c in donations.values()))
    arguments = sorted({input_keys[i][0] for i in donors})
    change = f"jax.jit(..., donate_argnums=({', '.join(map(str, arguments))}{',' if len(arguments) == 1 else ''}))"
    printed = f"the state fix is made ({candidate.change})"
    if moves:
        # A move's layouts win over the state fix's for the values it moves (and the state it pins).
        candidate = dataclasses.replace(
            candidate, change=f"{'; '.join(m.change for m in moves)}; {candidate.change} for the other state values",
            arguments={**candidate.arguments, **{i: s for m in moves for i, s in m.arguments.items()}},
            results={**candidate.results, **{i: s for m in moves for i, s in m.results.items()}},
            donors=candidate.donors.union(*(m.donors for m in moves)))
        check = run(candidate)
        if check.verdict is FixVerdict.failed:
            return findings
        printed = (f"the fixes printed for the state are made ({candidate.change}; together measured "
                   f"{cost_text(check)} against the step as written)")
    both = run(dataclasses.replace(candidate, change=f"{change} with {candidate.change}",
                                   donors=candidate.donors | donors))
    # Measured against those fixes alone: what the donation adds once they are made.
    return donation_after_state_fix(findings, on_top_of(check, both), change, printed, them=bool(moves))
