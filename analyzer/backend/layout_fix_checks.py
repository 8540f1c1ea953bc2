"""The fixes of SL204 (a constraint on axes that do not divide the value), SL206 (a value propagation cuts
unevenly) and SL205 (a donation no output reuses), compiled and measured as fix_checks.py measures a
parameter's: the program as written and each candidate compiled side by side, a candidate printed as the fix
only when measured better.

SL204's candidates edit the constraint itself (its ``sdy.sharding_constraint`` op in the StableHLO): the
uneven axes moved to a dimension they divide, or only the axes that divide it kept. SL206's are the ones its
finding carries (``Finding.candidates``, derived by the rule from Shardy's propagation, which is not run
again here): the argument the value inherits its cut from moved as a parameter's fix moves it (with its
optimizer state, returned in that layout), and a constraint inserted on the value (an
``sdy.sharding_constraint``, what ``with_sharding_constraint`` lowers to) with SL204's alternatives; the
best measured better is printed. An SL101 or SL102 whose cause is the user's constraint (a gather of what it
shards, no argument behind it) edits that constraint: the gathered axes moved to another dimension they
divide, or dropped. SL205's pins the output of the donated input's shape and dtype to the input's sharding
and restores the donation (jit left it out of the module, having found no output to match), so XLA can write
the output into the donated buffer; failing that, the program without the donation (its
``jax.buffer_donor`` or ``tf.aliasing_output`` taken off) is compiled too, and what it measured is said.
SL104's (a layout change XLA makes by replicating the whole value) inserts a constraint for each of the rule's
staged layouts, in order, before the constraint (or the pinned result) that asks for the value's layout; where
the program states that layout nowhere, the staged layouts are said to be advice, not compiled, and why. An
SL206 whose cut comes from the user's constraint (no argument holds its axes) restates that constraint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import constraint_change_text, normalized, pspec_text
from ...passes.models.fix_check import FixVerdict, StatedLayoutEdit
from ...passes.models.report import STATED_CONSTRAINT, Finding, FixCandidate, TargetReport, TensorInfo
from ...passes.pipelines.catalogue import PARAMETER_FIXES, STATED_LAYOUT_FIXES, layout_edit
from ...passes.pipelines.entry import entry_signature, state_roundtrips
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ...passes.pipelines.stablehlo_edits import (
    constraints_at,
    constraints_stating,
    even_choices,
    gathered_axes_off,
)
from ..adapter import jax_adapter
from ..context.config import Settings
from ..supervision import isolation
from .candidate_compile import compiled_beside_written
from .fix_verdicts import (
    baseline,
    check_gain,
    cost_text,
    for_finding,
    measured_check,
    not_offered_text,
    rematerializations,
)
from .parameter_moves import kept_count, left_to_xla, listed, moved_text, single_move, state_returns
from .sharding_edits import with_entry_shardings
from .split_activation_fixes import also_tried, inserted_constraint, none_helped, splits_activation

_CONSTRAINT = re.compile(r"^sharding_constraint\[(\d+)\]$")
_PINNED = re.compile(r"^pin (\S+) with out_shardings ")
# Candidates compiled per target (each a compile of the whole step).
MAX_CHECKS = 4


@dataclass(frozen=True)
class _Edit:
    change: str
    fix: str
    results: dict[int, list[list[str]]] = field(default_factory=dict)
    constraints: dict[int, list[list[str]]] = field(default_factory=dict)
    donors: frozenset[int] = frozenset()
    inserted: dict[tuple[int, int], list[list[str]]] = field(default_factory=dict)
    arguments: dict[int, list[list[str]]] = field(default_factory=dict)
    casts: dict[int, int] = field(default_factory=dict)  # result -> the argument whose dtype it is returned in
    staged: dict[int, list[list[list[str]]]] = field(default_factory=dict)  # constraint -> layouts before it
    staged_results: dict[int, list[list[list[str]]]] = field(default_factory=dict)  # result -> layouts before it
    undonated: frozenset[int] = frozenset()  # arguments whose donation is dropped (SL205's last resort)


def _undoes_constraint(f: Finding) -> bool:
    """A collective finding caused by no argument but by the user's constraint it gathers back (the rules
    that name a constraint, SL101's and SL102's, set ``constraint`` only then; a stated layout's finding, SL206's,
    names it as the cause its own candidates edit)."""
    return f.constraint is not None and f.parameter is None and f.rule not in STATED_LAYOUT_FIXES


def _constraint_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """The constraint a gather undoes, with the gathered axes kept off the dimension the op reads along
    (moved to another dimension they divide, or dropped): every constraint at its line stating its sharding."""
    cause = f.constraint
    if cause is None or cause.source is None:
        return []
    names = set(f.ops or [f.subject or ""])
    gathered = sorted({a.split(":")[0] for c in report.collectives if c.hlo_name in names and c.kind == "all-gather"
                       for a in c.mesh_axes})
    stated, specs = gathered_axes_off(module, cause.source, cause.sharding, set(gathered))
    line = cause.source.line
    return [_Edit(f"the with_sharding_constraint at line {line} -> {pspec_text(spec)}",
                  constraint_change_text(line, spec, cause.sharding, gathered),
                  constraints={k.ordinal: spec for k in stated})
            for spec in specs]


def _edits_of(f: Finding, report: TargetReport, module) -> list[_Edit]:
    if _undoes_constraint(f):
        return _constraint_edits(f, report, module)
    if splits_activation(f) or f.rule in PARAMETER_FIXES:  # else a parameter's candidates are fix_checks.py's
        return _rule_candidate_edits(f, report, module) if splits_activation(f) else []
    kind = layout_edit(f)
    return _EDITS[kind](f, report, module) if kind is not None else []


def _even_constraint_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """A constraint on axes that do not divide its value: the divisible alternatives of every constraint the
    finding stands for. One finding may stand for several constraints at its line (a layer called in a loop):
    each is edited."""
    ordinals = {int(m.group(1)) for name in (f.ops or [f.subject or ""]) if (m := _CONSTRAINT.match(name))}
    choices = even_choices(module, ordinals)
    if not choices or any(not alternatives for alternatives in choices.values()):
        return []
    count = min(len(alternatives) for alternatives in choices.values())
    return [_Edit(f"{f.subject} -> {pspec_text(choices[min(choices)][i])}",
                  f"constrain it as {pspec_text(choices[min(choices)][i])}",
                  constraints={k: alternatives[i] for k, alternatives in choices.items()})
            for i in range(count)]


def _rule_candidate_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """The candidates the rule derived (the argument the value inherits its cut from, moved as a parameter's
    fix moves it: with its optimizer state, returned in that layout; a constraint inserted on the value),
    each compiled; Shardy's propagation is not run again."""
    return [e for c in f.candidates if (e := _propagated_edit(c, f, report, module)) is not None]


def _donation_or_drop_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """Dropping the donation is compiled too: printed as the fix only where measured better, and otherwise
    what it was measured to change is said beside the other candidates' figures."""
    return _donation_edits(f, report, module) + [e for e in [_drop_edit(f, report)] if e is not None]


def _drop_edit(f: Finding, report: TargetReport) -> _Edit | None:
    """SL205's donation dropped: each donated argument the finding stands for lowered without it (its
    ``jax.buffer_donor`` or ``tf.aliasing_output`` removed, as jit lowers it without ``donate_argnums``)."""
    by_path = {t.path: t for t in report.inputs}
    names = f.ops or [f.subject or ""]
    if not all(n in by_path for n in names):
        return None
    donated = f.parameter or f.subject
    return _Edit(f"{donated} dropped from donate_argnums", f"drop {donated} from donate_argnums",
                 undonated=frozenset(by_path[n].index for n in names))


def _donation_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """SL205's own fix: the output returned in the donated input's dtype, or pinned to its sharding."""
    if f.suggested_sharding is None:
        return _recast_edits(f, report)
    # Otherwise the output pinned to the donated input's sharding.
    # Each donated input the finding stands for (a layer's weight in every layer) pinned back where it
    # comes out: the output that is that input coming back (its pytree path), not any of its shape.
    returned = {rt.input.index: rt.output for rt in state_roundtrips(entry_signature(module, FIX_CHECKS), FIX_CHECKS)}
    by_path = {t.path: t for t in report.inputs}
    pins: dict[int, list[list[str]]] = {}
    donors: set[int] = set()
    outs: list[str] = []
    for name in f.ops or [f.subject or ""]:
        given = by_path.get(name)
        out = _resharded_output(given, returned, report) if given is not None else None
        if given is None or out is None:
            return []
        pins[out.index], donors = given.sharding or [], donors | {given.index}
        outs.append(out.path)
    spec = f.suggested_sharding
    # Several layers' outputs are named as the rule's fix names them (result[0].blocks[*]).
    named = _PINNED.match(f.fix or "")
    shown = outs[0] if len(outs) == 1 or named is None else named.group(1)
    donated = f.parameter or f.subject
    return [_Edit(f"out_shardings pinning {shown} to {pspec_text(spec)}, {donated} donated",
                  f"pin {shown} with out_shardings to {pspec_text(spec)}, the donated input's sharding, "
                  "so XLA writes it into the donated buffer",
                  results=pins, donors=frozenset(donors))]


def _staged_edits(f: Finding, report: TargetReport, module) -> list[_Edit]:
    """SL104's staged layouts as an edit: before what asks for the value's last layout (the constraints at the
    finding's line stating it, else the only constraint or, failing that, the only result pinned to it), a
    constraint for each layout on the way, in order (what ``with_sharding_constraint`` one axis at a time
    lowers to). None where nothing in the program states that layout."""
    if len(f.candidates) < 2:  # one: a host callback's reader, its split's argument without the axes (a move)
        return [e for c in f.candidates[:1] if (e := _propagated_edit(c, f, report, module)) is not None]
    target = f.candidates[-1].sharding
    rank = len(target)
    stating = constraints_stating(module, target)
    at_line = [k for k in constraints_at(module, f.source) if k in stating] if f.source is not None else []
    chosen = at_line or (stating if len(stating) == 1 else [])
    pinned = [o.index for o in entry_signature(module, FIX_CHECKS).outputs
              if len(o.shape) == rank and normalized(o.sharding, rank) == normalized(target, rank)]
    steps = [c.sharding for c in f.candidates[:-1]]
    change = f"{f.subject} resharded one axis at a time: " + " then ".join(pspec_text(c.sharding)
                                                                          for c in f.candidates)
    if chosen:
        return [_Edit(change, f.fix or "", staged={k.ordinal: steps for k in chosen})]
    if len(pinned) == 1 and not stating:
        return [_Edit(change, f.fix or "", staged_results={pinned[0]: steps})]
    return []


def _propagated_edit(c: FixCandidate, f: Finding, report: TargetReport, module) -> _Edit | None:
    """One of SL206's candidates as an edit: a constraint inserted on the padded value, the argument moved, or
    the user's constraint the value inherits its cut from restated (every constraint at its line stating it)."""
    spec = pspec_text(c.sharding)
    if c.value == STATED_CONSTRAINT:
        cause = f.constraint
        if cause is None or cause.source is None:
            return None
        stated = constraints_at(module, cause.source, cause.sharding)
        if not stated or len({k.shape for k in stated}) != 1:
            return None
        return _Edit(f"the with_sharding_constraint at line {cause.source.line} -> {spec}", f.fix or "",
                     constraints={k.ordinal: c.sharding for k in stated})
    if (inserted := inserted_constraint(f, c)) is not None:  # a constraint on the values the candidate names
        return _Edit(inserted[0], inserted[1], inserted=inserted[2])
    given = next((t for t in report.inputs if t.path == c.value), None)
    if given is None:
        return None
    returned = state_returns({rt.output.index: rt.input.index
                              for rt in state_roundtrips(entry_signature(module, FIX_CHECKS), FIX_CHECKS)},
                             report.inputs, report.outputs)
    arguments, results = single_move(report.inputs, returned, {given.index: c.sharding})
    kept = kept_count(returned, arguments, results)
    by_index = {t.index: t.path for t in report.inputs}
    mirrored = [by_index[i] for i in sorted(arguments) if i != given.index]
    with_state = f" with {listed(mirrored)}" if mirrored else ""
    return _Edit(f"{c.value}{with_state} -> {spec}",
                 f"shard {c.value} as {spec} instead of {pspec_text(given.sharding or [])}"
                 + moved_text(mirrored, len(results) - kept, kept, left_to_xla(report.inputs, returned, results)),
                 results=results, arguments=arguments)


def _recast_edits(f: Finding, report: TargetReport) -> list[_Edit]:
    """SL205 where no output has the donated input's dtype: each output of its shape returned in the input's
    dtype (a cast at the program's end, as ``.astype`` in the step), on the input's sharding, the donation
    restored (jit left it out of the module), so XLA can write the output into the donated buffer."""
    by_path = {t.path: t for t in report.inputs}
    casts: dict[int, int] = {}
    pins: dict[int, list[list[str]]] = {}
    outs: list[str] = []
    for name in f.ops or [f.subject or ""]:
        given = by_path.get(name)
        if given is None or any(o.shape == given.shape and o.dtype == given.dtype for o in report.outputs):
            return []  # an output of its dtype: a layout or a taken buffer, not a dtype, keeps the donation
        out = next((o for o in report.outputs if o.shape == given.shape and o.index not in casts), None)
        if out is None:
            return []
        casts[out.index] = given.index
        if normalized(out.sharding, len(out.shape)) != normalized(given.sharding, len(given.shape)):
            pins[out.index] = given.sharding or []
        outs.append(out.path)
    donated = f.parameter or f.subject
    dtype = by_path[f.subject].dtype if f.subject in by_path else "the donated dtype"
    shown = listed(outs) if len(outs) <= 2 else f"{outs[0]} and {len(outs) - 1} more"
    return [_Edit(f"{shown} returned as {dtype}, {donated} donated",
                  f"return {donated} as {dtype} for XLA to write into it ({shown} cast to {dtype} where the step "
                  "returns it, or computed in it)",
                  results=pins, donors=frozenset(by_path[n].index for n in f.ops or [f.subject or ""]), casts=casts)]


def _resharded_output(given: TensorInfo, returned: dict[int, TensorInfo], report: TargetReport
                      ) -> TensorInfo | None:
    """The output to pin for a donated input: its round trip's, else the first of its shape and dtype on
    another layout (a step whose result is not its state's tree)."""
    layout = normalized(given.sharding, len(given.shape))
    candidates = [returned[given.index]] if given.index in returned else report.outputs
    return next((o for o in candidates if o.shape == given.shape and o.dtype == given.dtype
                 and normalized(o.sharding, len(o.shape)) != layout), None)


def _uncompiled_staging(report: TargetReport, planned: dict[int, list[_Edit]], module) -> TargetReport:
    """SL104's staged layouts that could not be compiled said to be advice, with the reason: the checks' budget
    was spent, or nothing in the program states the value's layout (no constraint, no pinned result: the
    layout is propagation's, from an argument's sharding where one has it), so no op exists to stage it before."""
    def reason(f: Finding) -> str:
        if _staged_edits(f, report, module):
            return f"the checks' budget of {MAX_CHECKS} compiles a target is spent"
        target = f.candidates[-1].sharding
        rank = len(target)
        named = [t.path for t in report.inputs
                 if len(t.shape) == rank and normalized(t.sharding, rank) == normalized(target, rank)]
        stated = (f"; only {listed(named)}'s sharding states it: propagation gives the value that layout"
                  if named else "; propagation gives the value that layout")
        return (f"no with_sharding_constraint or out_shardings in the program states {pspec_text(target)}, so there "
                f"is no op to stage it before{stated}")

    findings = [f.model_copy(update={"fix": f"{f.fix} (advice, not compiled: {reason(f)})"})
                if layout_edit(f) is StatedLayoutEdit.staged and len(f.candidates) > 1 and k not in planned else f
                for k, f in enumerate(report.findings)]
    return report.model_copy(update={"findings": findings}) if findings != report.findings else report


def _donation_not_helped(checks: list, tried: str, already: set[str]) -> str:
    """SL205's fix where no candidate measured better: what returning the value in the donated layout or dtype
    was measured to do, and what dropping the donation was measured to change."""
    kept = ("returning it in its dtype does not help: " if any(e.casts for e, _ in checks)
            else "pinning the output to its layout does not help: ") + tried if tried else ""
    drop = next(((e, c) for e, c in checks if e.undonated), None)
    if drop is None:
        return f"{kept}; drop it from donate_argnums (not compiled: the checks' budget is spent)"
    e, c = drop
    if e.change in already:
        dropped = (f"{e.change}: jit already left the donation out of the module it lowered (no output matches "
                   f"it), so the step as compiled is the one without it, and dropping it measures no change "
                   f"(peak {format_bytes(c.peak_bytes_before)}, traffic {format_bytes(c.traffic_bytes_before)} "
                   "per step per device); it only keeps JAX from deleting the caller's array")
    elif c.verdict is FixVerdict.no_change:
        dropped = (f"{e.change} was tried, compiled and {not_offered_text(c)}: the donation buys the step nothing, "
                   "so dropping it changes only that JAX no longer deletes the caller's array")
    else:
        dropped = f"{e.change} was tried, compiled and {not_offered_text(c)}"
    return f"{kept}; {dropped}" if kept else f"no fix measured better: {dropped}"


# Each stated-layout edit's candidates, by the kind its rule's traits name.
_EDITS: dict[StatedLayoutEdit, Callable[[Finding, TargetReport, Any], list[_Edit]]] = {
    StatedLayoutEdit.even_constraint: _even_constraint_edits,
    StatedLayoutEdit.rule_candidates: _rule_candidate_edits,
    StatedLayoutEdit.staged: _staged_edits,
    StatedLayoutEdit.donation: _donation_or_drop_edits,
}


def check_layout_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                       progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with SL204's, SL205's, SL206's and the constraint causes' fixes compiled: the best candidate
    measured better printed as the fix (with its figures), else the finding says what was tried and what it
    cost."""
    if not any(f.rule in STATED_LAYOUT_FIXES or _undoes_constraint(f) or splits_activation(f) for f in report.findings):
        return report
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    planned: dict[int, list[_Edit]] = {}
    # Each distinct change compiled once: two findings of one constraint (the gather in its loop and the one
    # after it) share its candidates.
    unique: dict[str, _Edit] = {}
    # The findings' own candidates first; SL205's dropped donations (the last resort, printed only where
    # measured better) with the budget they leave.
    for last_resort in (False, True):
        for k, f in enumerate(report.findings):
            edits = [e for e in _edits_of(f, report, module) if bool(e.undonated) == last_resort
                     and (e.change in unique or len(unique) < MAX_CHECKS)]
            if edits:
                planned[k] = planned.get(k, []) + [unique.setdefault(e.change, e) for e in edits]
    report = _uncompiled_staging(report, planned, module)
    if not planned:
        return report
    isolation.phase(where, "compiling the layout findings' fixes to check them")
    ordered = list(unique.values())
    edited = {e.change: with_entry_shardings(module, e.results, sig.mesh_name or "mesh", e.arguments or None,
                                             e.constraints, e.donors, e.inserted, e.casts, e.staged,
                                             e.staged_results, e.undonated) for e in ordered}
    # A donation jit already left out of the module (no output matched its sharding): the program without it
    # is the program as written, whose figures are the report's; it is not compiled again.
    plain = with_entry_shardings(module, {}, sig.mesh_name or "mesh") if any(e.undonated for e in ordered) else None
    already = {e.change for e in ordered if e.undonated and edited[e.change] == plain}
    ordered_compiled = [e for e in ordered if e.change not in already]
    before, compiled = compiled_beside_written(report, text, [(e.change, edited[e.change]) for e in ordered_compiled],
                                               sig, settings, where, devices, progress)
    base = baseline(before, sig)
    written = rematerializations(before)
    results: dict[str, TargetReport | BaseException] = dict(zip((e.change for e in ordered_compiled), compiled))
    results.update({change: before for change in already})

    findings = list(report.findings)
    for k, edits in planned.items():
        f = findings[k]
        checks = [(e, for_finding(f, measured_check(e.change, results[e.change], base, sig, written))) for e in edits]
        better = [(e, c) for e, c in checks if c.verdict is FixVerdict.better]
        if better:
            e, c = max(better, key=lambda ec: check_gain(ec[1]))  # the larger relative gain, not more bytes
            # The spec the fix gives the argument the finding names: none where it constrains a value instead.
            spec = (None if e.undonated else e.constraints[min(e.constraints)] if e.constraints
                    else (None if f.parameter else next(iter(e.inserted.values()))) if e.inserted
                    else e.arguments[min(e.arguments)] if e.arguments else f.suggested_sharding)
            others = also_tried(f, e.change, [(o.change, oc) for o, oc in checks])
            findings[k] = f.model_copy(update={
                "fix_check": c, "suggested_sharding": spec, "fix": f"{e.fix} (checked: {cost_text(c)}){others}"})
            continue
        tried = "; ".join(f"{e.change} was tried, compiled and {not_offered_text(c)}" for e, c in checks
                          if not e.undonated)
        if layout_edit(f) is StatedLayoutEdit.donation:
            text = _donation_not_helped(checks, tried, already)
        else:
            text = none_helped(f, tried)
        findings[k] = f.model_copy(update={"fix_check": checks[0][1], "suggested_sharding": None, "fix": text})
    return report.model_copy(update={"findings": findings})

