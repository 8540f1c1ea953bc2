"""Every fix lint prints is compiled before it is shown.

A finding's fix is a change of stated shardings (a parameter's new PartitionSpec, the state outputs pinned to
their inputs' layouts) or a donation, as its rule's traits say (passes/pipelines/catalogue.py). Each is applied to
the target's StableHLO (sharding_edits.py), compiled the same way as the program as written, and compared on two
figures: the per-device peak, and the per-device traffic of a step (its collectives, plus the state the next step
reshards on entry because an output came back on another layout).

A fix is offered as the fix only when its compile measured it better: less traffic or a lower peak, the other not
worse beyond the tolerance (fix_verdicts.py: _NOISE of itself, or else _GROWTH of the peak as written and no more
than the first fell). A fix measured no change, a trade-off or worse is never printed as the fix: the finding keeps
what it found and says what was tried and what it cost (each of the rule's candidates, in order, until one is
better; a finding of several tensor-parallel pairings compiles each of them and prints the measured best). The
rules about state (SL201, SL203) name the same values (a replicated input that comes back sharded): one
recommendation, the better of pinning the output back and giving the input the layout the step returns it in.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from ...passes.common.sharding_text import normalized, pspec_text
from ...passes.models.entry import EntrySignature, RoundTrip
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, FixCandidate, TargetReport, TensorInfo
from ...passes.pipelines.catalogue import (
    DONATION_FIXES,
    OTHER_DIMENSION_FIXES,
    PARAMETER_FIXES,
    STATE_ARGUMENT_FIXES,
    STATE_RULES,
)
from ...passes.pipelines.entry import changed_roundtrips, entry_signature, state_roundtrips
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..supervision import isolation
from .alternative_moves import other_candidates, other_dimension
from .candidate_compile import compiled_candidate
from .donation_fixes import (
    donation_checked,
    donation_on_top,
    donors_of,
    joint_donation,
    one_donation_advice,
)
from .fix_verdicts import (
    baseline,
    for_finding,
    measured_check,
    not_offered_text,
    pin_not_offered,
    rematerializations,
    unchecked_text,
    with_check,
    without_unfixable_small_outputs,
)
from .kept_pins import needed_pins, without_kept_pins
from .pair_fixes import (
    MAX_PAIRINGS,
    best_pairing,
    pair_attempts,
    pair_change,
    pairing_tried,
    partner_edits,
    rival_pairings,
)
from .parameter_moves import left_to_xla, listed, matcher, moved_text, single_move, state_returns
from .sharding_edits import with_entry_shardings
from .side_by_side import CompileCounter, compile_pool, compile_side_by_side, entry_edit, outcome
from .state_advice import (
    better_moves_of_state,
    better_state_fix,
    moves_printed_for_state,
    one_advice_per_value,
    state_advice,
)

# Fixes compiled per target: each costs a compile of the whole step.
MAX_CHECKS = 4
# The rules whose fix is a parameter's new sharding (traits in their files; STATE_ARGUMENT_FIXES: state_advice's).
_PARAMETER_FIXES = PARAMETER_FIXES


@dataclass(frozen=True)
class _Candidate:
    change: str
    arguments: dict[int, list[list[str]]]
    results: dict[int, list[list[str]]]
    # Arguments the user donated that jit left out of the module (no output matched): donated again, so a pinned
    # output can reuse the buffer, as in the user's program with out_shardings= written.
    donors: frozenset[int] = frozenset()
    # The optimizer state the move takes with the parameters it names (their paths): the texts name them.
    mirrored: tuple[str, ...] = ()
    # The state results it returns on their inputs' layouts; the state arguments it leaves to XLA (left_to_xla).
    kept: int = 0
    free: tuple[str, ...] = ()
    # The pins of the state it leaves where it is, compiled only where its compile shows them needed (kept_pins.py).
    unpinned: dict[int, list[list[str]]] = dataclasses.field(default_factory=dict)


def _parameter_candidate(f: Finding, inputs: list[TensorInfo], returned: dict[int, int],
                         together: list[FixCandidate] | None = None) -> _Candidate | None:
    """The finding's new sharding for every argument its parameters name (each layer), as a single move
    (parameter_moves.py): with the optimizer state that mirrors it, and returned in that layout
    (``returned``: result -> the argument it returns), as suggest's single moves compile it; ``together``:
    the other arguments the same change moves, each with its own layout and state (a tensor-parallel pair's
    row-parallel half, pair_fixes.py)."""
    if f.parameter is None or f.suggested_sharding is None or f.parameter_sharding is None:
        return None
    edits: dict[int, list[list[str]]] = {}
    for parameter in f.parameters or [f.parameter]:
        whole = matcher(parameter)
        named = [t for t in inputs if whole.match(t.path)]
        if not named:
            return None
        before = normalized(f.parameter_sharding, len(named[0].shape))
        edits.update({t.index: f.suggested_sharding for t in named
                      if normalized(t.sharding, len(t.shape)) == before})
    if not edits:
        return None
    if together:
        return _pair_candidate(f, inputs, returned, edits, together)
    arguments, results = single_move(inputs, returned, edits)
    named_text = ", ".join(f.parameters or [f.parameter])
    by_index = {t.index: t.path for t in inputs}
    mirrored = tuple(by_index[i] for i in sorted(arguments) if i not in edits)
    with_state = f" with {listed(list(mirrored))}" if mirrored else ""
    free, (results, unpinned) = left_to_xla(inputs, returned, results), without_kept_pins(returned, arguments, results)
    return _Candidate(f"{named_text}{with_state} -> {pspec_text(f.suggested_sharding)}", arguments, results,
                      mirrored=mirrored, free=free, unpinned=unpinned)


def _pair_candidate(f: Finding, inputs: list[TensorInfo], returned: dict[int, int], edits: dict[int, list[list[str]]],
                    together: list[FixCandidate]) -> _Candidate | None:
    """The finding's move with its partners' (pair_fixes.py), each move's optimizer state named after it, as the
    change text gives each path the layout its move names."""
    partners = {i: s for i, s in (partner_edits(together, inputs) or {}).items() if i not in edits}
    if not partners:
        return None
    arguments, results = single_move(inputs, returned, {**edits, **partners})
    change, mirrored = pair_change(f, together, inputs, edits, partners, arguments)
    free, (results, unpinned) = left_to_xla(inputs, returned, results), without_kept_pins(returned, arguments, results)
    return _Candidate(change, arguments, results, mirrored=mirrored, free=free, unpinned=unpinned)


def _state_candidates(report: TargetReport, sig: EntrySignature) -> tuple[_Candidate | None, _Candidate | None]:
    """(pin the state outputs to their inputs' layouts, give the inputs the layouts they come back in)."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    moved = changed_roundtrips(state_roundtrips(compiled, FIX_CHECKS), FIX_CHECKS)
    if not moved:
        return None, None
    pin = _Candidate("out_shardings pinning every state output to its input's layout",
                     {}, {rt.output.index: rt.input.sharding or [] for rt in moved},
                     frozenset(rt.input.index for rt in moved if rt.input.donated))
    take = _Candidate("in_shardings giving each state input the layout the step returns it in",
                      {rt.input.index: rt.output.sharding or [] for rt in moved}, {})
    return pin, take


def check_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each fix compiled: its ``fix_check`` set, and a fix that makes the step worse (or does not
    compile) reworded to say what it costs instead of being offered. ``progress``: each compile, counted."""
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    pin, take = _state_candidates(report, sig)
    returned = state_returns({rt.output.index: rt.input.index for rt in state_roundtrips(sig, FIX_CHECKS)},
                             report.inputs, report.outputs)
    wanted = [f for f in report.findings if f.rule in _PARAMETER_FIXES and f.suggested_sharding is not None]
    # The suggested out_shardings are checked even where SL201 is ignored: the text is printed either way.
    donations = {f.subject: c for f in report.findings if f.rule in DONATION_FIXES
                 for c in [_donation_candidate(f, report.inputs)] if c is not None}
    if not wanted and not donations and not report.suggested_out_shardings and not any(
            f.rule in STATE_RULES for f in report.findings):
        return report
    if not wanted and not donations and pin is None:
        return report
    isolation.phase(where, "compiling the findings' fixes to check them")
    inputs = list(report.inputs)
    # The candidates the loop reads, in its order: the first MAX_CHECKS parameter fixes, then the two state ones,
    # each independent of the others: they compile side by side (XLA releases the GIL while it compiles).
    moved = _moved_state(report, sig)
    # Each finding's attempts, built once: the plan below compiles their first, the loop reads them in order.
    attempts_of = {k: _attempts(f, inputs, returned) for k, f in enumerate(report.findings)
                   if not (f.rule in STATE_ARGUMENT_FIXES and f.subject in moved)}
    planned = [attempts[0][2] for attempts in attempts_of.values() if attempts][:MAX_CHECKS]
    parameter_planned = len(planned)
    # The state fixes, printed on every finding about state, are compiled outside the budget where it has no room
    # (a jraph GraphNet's four parameter fixes spent it, and SL201 printed "pin them" unchecked).
    state_in_budget = MAX_CHECKS - len(planned) >= 2
    if pin is not None and take is not None:
        planned += [pin, take]
    # A finding's other pairings, compiled beside them outside the budget (at most MAX_PAIRINGS): the best printed.
    planned += [c for attempts in [a for a in attempts_of.values() if a][:parameter_planned]
                for c in rival_pairings(attempts)][:MAX_PAIRINGS]
    # A missing donation's fix (a jit option) is compiled too, outside the budget: one candidate per argument
    # SL202 names, and donating them all in one jit (donation_fixes.py).
    jointly = joint_donation([c.donors for c in donations.values()], sig.input_keys)
    joint = _Candidate(jointly[0], {}, {}, jointly[1]) if jointly is not None else None
    planned += list(donations.values()) + ([joint] if joint is not None else [])

    def job(c: _Candidate) -> Callable[[], TargetReport]:
        """The candidate's compile: its text, and what it changes at the entry (side_by_side.same_program)."""
        text = with_entry_shardings(module, c.results, sig.mesh_name or "mesh", c.arguments, donors=c.donors)
        edit = entry_edit(sig, c.arguments, c.results, c.donors)
        return functools.partial(compiled_candidate, report.name, text, sig, settings, where, devices, edit)

    # The program as written is the report's own compile (lint's, or check's of this text): its figures are the
    # baseline. A target XLA refused (out of memory: no figures) is compiled here, and raises as it did there.
    counter = CompileCounter(progress, report.name)
    as_written = [] if report.memory is not None else [text]
    labels = ["the program as written"] * len(as_written) + [c.change for c in planned]
    jobs: list[Callable[[], TargetReport]] = [
        functools.partial(compiled_candidate, report.name, t, sig, settings, where, devices) for t in as_written
    ] + [job(c) for c in planned]
    # A second choice the state fixes' outcomes call for, compiled beside the donations still compiling.
    early: dict[str, Future[TargetReport | BaseException]] = {}
    with compile_pool(len(jobs)) as pool:
        if pool is None:
            compiled = compile_side_by_side(jobs, counter.announce(labels))
        else:
            futures = [pool.submit(outcome, job, then) for job, then in zip(jobs, counter.announce(labels))]
            if not as_written and pin is not None and take is not None and not parameter_planned:
                states = [futures[planned.index(c)] for c in (pin, take)]
                for c in _second_choices(report, [f.result() for f in states], (pin, take), sig, moved, returned):
                    [then] = counter.announce([c.change], "to check a second choice")
                    early[_key(c)] = pool.submit(outcome, job(c), then)
            compiled = [f.result() for f in futures]
    before = compiled.pop(0) if as_written else report
    if isinstance(before, BaseException):
        raise before
    base = baseline(before, sig)
    written = rematerializations(before)
    # Keyed by what the candidate changes: the loop below builds its candidates anew from the findings.
    after_of: dict[str, TargetReport | BaseException] = {_key(c): compiled[k] for k, c in enumerate(planned)}
    after_of |= {k: f.result() for k, f in early.items()}
    budget = MAX_CHECKS
    ran: dict[str, _Candidate] = {}  # each candidate compiled, by its change: the donation builds on them

    def run(c: _Candidate, counted: bool = True) -> FixCheck:
        nonlocal budget
        budget -= counted
        ran[c.change] = c
        # The planned candidates were compiled side by side above; a second choice (another dimension,
        # SL203's own suggestion after the state fixes, where not compiled early) is compiled when the loop
        # below asks for it.
        after = after_of.get(_key(c))
        if after is None:
            [done] = counter.announce([c.change], "to check a second choice")
            after = outcome(job(c), done)
        if c.unpinned and isinstance(after, TargetReport) and (needed := needed_pins(after, c.unpinned)):
            ran[c.change] = c = dataclasses.replace(c, results={**c.results, **needed}, kept=len(needed), unpinned={})
            after = outcome(job(c), counter.announce([c.change], "with the out_shardings it needs")[0])
        return measured_check(c.change, after, base, sig, written)

    findings = list(report.findings)
    for k, f in enumerate(findings):
        if f.rule in DONATION_FIXES and (donation := donations.get(f.subject)) is not None:
            findings[k] = donation_checked(f, measured_check(donation.change, after_of[_key(donation)], base, sig,
                                                                written))
            continue
        attempts = attempts_of.get(k, [])
        if not attempts:
            continue
        first, _, planned_first = attempts[0]
        if budget <= 0 and _key(planned_first) not in after_of:  # a printed fix is checked, or not offered
            findings[k] = f.model_copy(update={"fix": unchecked_text(planned_first.change, MAX_CHECKS),
                                               "suggested_sharding": None})
            continue
        check = for_finding(f, run(planned_first, counted=budget > 0))  # compiled already where the budget is spent
        # Several pairings (every pair together, then each alone): each is compiled and the measured best printed.
        rivals = [(a, c) for a, t, c in attempts[1:] if any(c is r for r in rival_pairings(attempts))]
        pairings = [(first, planned_first, check)] + [(a, c, for_finding(f, run(c, counted=False))) for a, c in rivals]
        first, planned_first, check = best_pairing(pairings)
        others = [(o, None) for o in (other_candidates(f) if f.rule not in OTHER_DIMENSION_FIXES else [
            o for o in [other_dimension(f, inputs, report.mesh)] if o is not None])]
        tried = [pairing_tried(p) for _, c, p in pairings if c is not planned_first]
        for other, made in [(a, c) for a, _, c in attempts[1:] if all(c is not p for _, p, _ in pairings)] + others \
                if check.verdict is not FixVerdict.better else []:
            alternative = made or _parameter_candidate(other, inputs, returned)
            if alternative is None or budget <= 0:
                continue
            second = for_finding(f, run(alternative))
            if second.verdict is FixVerdict.better:
                # A pair's attempts before it are said, as the finding's weights and partners were all tried.
                earlier = (f"; {check.change} was tried{' first' if len(pairings) == 1 else ''}, compiled and "
                           f"{not_offered_text(check)}") \
                    if len(attempts) > 1 else ""
                findings[k] = with_check(other, second, (other.fix or "") + _moving(ran[alternative.change]))
                findings[k] = findings[k].model_copy(update={"fix": (findings[k].fix or "") + "".join(
                    [earlier, *tried] if len(attempts) > 1 else [])})
                break
            tried.append(f"; {second.change} was tried too, compiled and {not_offered_text(second)}")
        else:
            findings[k] = with_check(first, check, (first.fix or "") + _moving(ran[planned_first.change]))
            findings[k] = findings[k].model_copy(update={"fix": (findings[k].fix or "") + "".join(tried)})
    if joint is not None:
        findings = one_donation_advice(findings, measured_check(joint.change, after_of[_key(joint)], base, sig,
                                                                   written))
    if pin is not None and take is not None:
        pinned, taken = run(pin, counted=state_in_budget), run(take, counted=state_in_budget)
        findings, notes = without_unfixable_small_outputs(state_advice(findings, pinned, taken, moved), pinned, taken)
        report = report.model_copy(update={"warnings": [*report.warnings, *notes]})
        # Neither state fix helps: SL203's own suggestion for those values (shard the replicated
        # argument and its optimizer state on a mesh axis) is the next one tried.
        for k, f in enumerate(findings):
            own = next((g for g in report.findings if g.rule == f.rule and g.subject == f.subject), None)
            if (f.rule not in STATE_ARGUMENT_FIXES or f.subject not in moved or f.fix_check is None or own is None
                    or f.fix_check.verdict is FixVerdict.better or budget <= 0):
                continue
            candidate = _parameter_candidate(own, list(report.inputs), returned)
            if candidate is None:
                continue
            check = run(candidate)
            if check.verdict is FixVerdict.better:
                findings[k] = with_check(own, check, (own.fix or "") + _moving(ran[candidate.change]))
            else:
                findings[k] = f.model_copy(update={
                    "fix": f"{f.fix}; {check.change} was tried, compiled and {not_offered_text(check)}"})
        findings = better_moves_of_state(one_advice_per_value(findings, moved), moved)
        findings = donation_on_top(findings, (pin, pinned) if better_state_fix(pinned, taken) is pinned
                                    else (take, taken), donations, run, sig.input_keys,
                                    [ran[c] for c in moves_printed_for_state(findings) if c in ran])
        if pinned.verdict is not FixVerdict.better and report.suggested_out_shardings:
            return report.model_copy(update={
                "findings": findings, "suggested_out_shardings": None,
                "warnings": [*report.warnings, *pin_not_offered(pinned, notes, findings)]})
    return report.model_copy(update={"findings": findings})


def _attempts(f: Finding, inputs: list[TensorInfo], returned: dict[int, int],
              ) -> list[tuple[Finding, list[FixCandidate], _Candidate]]:
    """A parameter fix's candidates in the order the loop compiles them (pair_fixes.pair_attempts: a
    tensor-parallel pair's first where it names one), each with the finding as it presents it and its partners;
    none for another rule's finding."""
    if f.rule not in _PARAMETER_FIXES:
        return []
    return [(a, t, c) for a, t in pair_attempts(f, inputs) for c in [_parameter_candidate(a, inputs, returned, t)]
            if c is not None]


def _second_choices(report: TargetReport, outcomes: list, state: tuple[_Candidate, _Candidate],
                    sig: EntrySignature, moved: dict[str, RoundTrip], returned: dict[int, int]) -> list[_Candidate]:
    """SL203's own suggestions that ``check_fixes``'s loop will compile after the state fixes (``state``, their
    compiles ``outcomes``), known as soon as those are compiled: none where either is measured better (or
    failed in a way the loop raises); else one per SL203 finding on a value that comes back on another
    layout, in the findings' order, as many as the budget the loop has left (no parameter fix ran before)."""
    if any(isinstance(o, BaseException) and not isinstance(o, ShardLintInputError) for o in outcomes):
        return []
    base = baseline(report, sig)
    remats = rematerializations(report)
    if any(measured_check(c.change, o, base, sig, remats).verdict is FixVerdict.better
           for c, o in zip(state, outcomes)):
        return []
    out: list[_Candidate] = []
    budget = MAX_CHECKS - len(state)
    for f in report.findings:
        if f.rule not in STATE_ARGUMENT_FIXES or f.subject not in moved or budget <= 0:
            continue
        own = next(g for g in report.findings if g.rule == f.rule and g.subject == f.subject)
        candidate = _parameter_candidate(own, list(report.inputs), returned)
        if candidate is not None:
            budget -= 1
            out += [candidate] if all(_key(candidate) != _key(c) for c in out) else []
    return out


def _donation_candidate(f: Finding, inputs: list[TensorInfo]) -> _Candidate | None:
    """SL202's fix as a candidate: every array of the argument it names donated (jit's donate_argnums)."""
    donors = donors_of(f, inputs)
    return _Candidate(f.fix or "donate_argnums", {}, {}, donors) if donors else None


def _key(c: _Candidate) -> str:
    return repr((c.arguments, c.results, sorted(c.donors)))


def _moved_state(report: TargetReport, sig: EntrySignature) -> dict[str, RoundTrip]:
    """Output path and input path -> each state value that comes back on another layout."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    out: dict[str, RoundTrip] = {}
    for rt in changed_roundtrips(state_roundtrips(compiled, FIX_CHECKS), FIX_CHECKS):
        out[rt.output.path] = out[rt.input.path] = rt
    return out


def _moving(c: _Candidate) -> str:
    return moved_text(c.mirrored, len(c.results) - c.kept, c.kept, c.free)
