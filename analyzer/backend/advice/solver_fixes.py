"""A finding whose own fix was compiled and not measured better gets ``suggest``'s layout for
the arguments it names, compiled and measured like any other fix.

A rule's candidate is one guess (move the named argument's axis to another dimension); where it
measures no change or worse, the answer is often another layout of the same arguments, or the axis
moved off another argument that holds it (a value array and the grid it is read at), which the rule
does not guess. The question is then ``suggest``'s, restricted: the same sharding problem
(``advice.problem.problem_of_text``, ``passes/solver``) with the finding's arguments free (each with the
layers and optimizer state that move with it, and the arguments holding the same mesh axes), every
other argument and every result the program states held as written, solved and checked against
propagation as ``suggest`` does (``advice.problem.refine``). The solver's choice, the first
``MAX_MOVES`` single moves of a mesh axis among those arguments (``advice.moves``), and the finding's
arguments (with their optimizer state) given the layout the compiled step returns them in (SL201's
recommendation for a value that comes back on another layout, so the two rules agree on it), built by
``advice.solver_candidates``, are compiled
side by side, the one ``suggest``'s own rule prefers (``advice.verdict.best_version``) is measured
through the fix checks' path (``fix_verdicts.measured_check``), and it is printed as the fix only when
measured better; otherwise the finding says what it cost, or that suggest keeps the arguments as
written. State that comes back is returned in its new layout, and the state a candidate does not move on
its input's layout, as ``suggest`` pins every version's (``parameter_moves.returning_state``): left to XLA,
a move can propagate another layout into it, and the pasted fix would make the next step reshard it.

A candidate that is a program the state fixes compiled already (the layout the step returns the arguments in,
given by the state fix too, its results pinned where that compile returned them: side_by_side.same_program) is
ranked on that compile's figures, and compiled itself only where it is the one printed.

It runs only for findings whose own fix failed, for at most ``MAX_SOLVER_FIXES`` argument sets per
target (findings about one set share one answer), so a lint whose fixes check pays nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ....passes.common.sharding_text import pspec_text
from ....passes.models.fix_check import FixCheck, FixVerdict
from ....passes.models.report import Finding, TargetReport, TensorInfo
from ....passes.pipelines.catalogue import ARGUMENT_LAYOUT_RULES
from ....passes.pipelines.entry import entry_signature
from ....passes.pipelines.suggest import SUGGEST, time_resolution
from ...adapter import jax_adapter
from ...context.config import Settings
from ...errors import ShardLintInputError
from ...supervision import isolation
from ..candidate_compile import compiled_candidate
from ..fix_verdicts import (
    baseline,
    cost_text,
    for_finding,
    judged_text,
    measured_check,
    not_offered_text,
    rematerializations,
)
from ..parameter_moves import listed, returning_state, returns_text, state_returns
from ..sharding_edits import with_entry_shardings
from ..side_by_side import CompileCounter, EntryEdit, entry_edit, finished, outcome, same_program
from .baselines import summary
from .problem import problem_of_text
from .solver_candidates import (
    BASELINES,
    RETURNED,
    Sharding,
    baseline_candidates,
    candidate_layouts,
    named_units,
    returned_layout,
    returned_state,
    single_move_candidates,
    with_axis_holders,
)
from .verdict import VersionText, advised_version, best_version, measured_version, with_rematerializations

# Argument sets solved for per target: each a solve of the cut problem and a compile per candidate (the
# solver's and at most solver_candidates.MAX_MOVES single moves), side by side.
MAX_SOLVER_FIXES = 2
# The rules whose findings are about the layout of the arguments they name (their traits say so).
_LAYOUT_RULES = ARGUMENT_LAYOUT_RULES


def _wanted(f: Finding, inputs: list[TensorInfo]) -> bool:
    """A layout finding whose own candidate was compiled and not measured better, naming arguments."""
    return (f.rule in _LAYOUT_RULES and f.fix_check is not None and f.fix_check.verdict is not FixVerdict.better
            and bool(named_units(f, inputs)))


def _state_results(target, report: TargetReport, edits: dict[int, Sharding]) -> dict[int, Sharding]:
    """The state results pinned: the moved state's to its new layout, the rest the written step returns as
    it takes it to its input's (parameter_moves.returning_state)."""
    returned = state_returns({rt.output.index: rt.input.index for rt in target.state}, report.inputs,
                             report.outputs)
    return returning_state(report.inputs, returned, edits)


def _change_text(edits: dict[int, Sharding], inputs: list[TensorInfo], returned: dict[int, int]) -> str:
    by_spec: dict[str, list[str]] = {}
    for i, s in sorted(edits.items()):
        by_spec.setdefault(pspec_text(s), []).append(inputs[i].path)
    back = " (returned in that layout)" if returned else ""
    return ", ".join(f"{', '.join(paths)} -> {spec}" for spec, paths in by_spec.items()) + back


def _fix_text(edits: dict[int, Sharding], inputs: list[TensorInfo], returned: dict[int, int], kept: int,
              free: tuple[str, ...]) -> str:
    by_change: dict[tuple[str, str], list[str]] = {}
    for i, s in sorted(edits.items()):
        by_change.setdefault((pspec_text(s), pspec_text(inputs[i].sharding or [])), []).append(inputs[i].path)
    parts = [f"{listed(paths)} as {new} instead of {old}" for (new, old), paths in by_change.items()]
    # The out_shardings it was compiled with: state that comes back in the new layout, the state it does not
    # move as taken (the next step reshards neither), the state the written step returns moved left to XLA.
    return "shard " + "; ".join(parts) + returns_text(len(returned), kept, free)


def _better(f: Finding, check: FixCheck, edits: dict[int, Sharding], inputs: list[TensorInfo],
            returned: dict[int, int], kept: int, name: str, free: tuple[str, ...] = (), axes: tuple[str, ...] = (),
            ) -> Finding:
    specs = {repr(s) for s in edits.values()}
    them = "it" if len(edits) == 1 else "them"
    # Said as what it is: suggest's solver or one of its single moves, over these arguments only; suggest
    # itself, free to move every argument, may choose another version (a ViT's user looked for it there).
    whose = (f"the layout the step returns {them} in" if name == RETURNED
             else f"the sharding solver's layout for {them}" if name == "solver"
             else f"suggest's {name} layout for {them}" if name in BASELINES
             else f"one move of a mesh axis for {them}")
    own = f.fix_check
    # What the rule's own fix was and what XLA measured it to do, so the finding says why another layout is
    # printed (a Llama's o_proj given back its input features with its moments: a trade-off, peak +34 MiB).
    if own is None:
        why = "the rule's own fix measured no better"
    elif own.verdict in (FixVerdict.rematerializes, FixVerdict.failed):
        why = f"the rule's own fix, {own.change}, was tried and {not_offered_text(own)}"
    else:
        why = f"the rule's own fix, {own.change}, was tried and measured {judged_text(own)}"
    if name in BASELINES:
        return _whole_version(f, check, edits, inputs, returned, kept, name, why, free, axes)
    return f.model_copy(update={
        "fix_check": check, "suggested_sharding": next(iter(edits.values())) if len(specs) == 1 else None,
        "fix": (f"{_fix_text(edits, inputs, returned, kept, free)}: {whose} with every other argument as written, "
                f"where {why} (checked: {cost_text(check)})")})


def _whole_version(f: Finding, check: FixCheck, edits: dict[int, Sharding], inputs: list[TensorInfo],
                   returned: dict[int, int], kept: int, name: str, why: str, free: tuple[str, ...],
                   axes: tuple[str, ...]) -> Finding:
    """The finding's fix where suggest's baseline version ``name`` (every argument changed) is measured best: the
    layout it gives the finding's argument, suggest's for that value, and what else it changes."""
    subject = next((t for t in inputs if t.path == f.parameter), None)
    own = edits.get(subject.index) if subject is not None else None
    said = (f"shard {f.parameter} as {pspec_text(own)} instead of {pspec_text(subject.sharding or [])}, and "
            f"{len(edits) - 1} other arguments as that version does" if subject is not None and own is not None
            else f"change {len(edits)} arguments as that version does")
    return f.model_copy(update={
        "fix_check": check, "suggested_sharding": own,
        "fix": (f"{said} (suggest's {name} version: {summary(name, axes)}){returns_text(len(returned), kept, free)}: "
                f"the best of the layouts tried for these arguments, where {why} (checked: {cost_text(check)})")})


def _key(edits: dict[int, Sharding]) -> str:
    return repr(sorted(edits.items()))


def with_solver_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                      progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each finding whose own fix was not measured better given suggest's layout for
    its arguments, where that compiles better (see the module's docstring)."""
    inputs = list(report.inputs)
    wanted = [k for k, f in enumerate(report.findings) if _wanted(f, inputs)]
    if not wanted or report.memory is None:
        return report
    isolation.phase(where, "solving for the arguments of findings whose own fix does not help")
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, SUGGEST)
    if sig.mesh.size <= 1 or not sig.mesh_name:
        return report
    try:
        target = problem_of_text(report.name, text, (), settings, lambda _sig: {}, where)
    except ShardLintInputError:
        return report  # no sharding problem to solve (Shardy rejects the module): the findings stand as checked
    spec = settings.solver_device_spec
    base = baseline(report, sig)
    counter = CompileCounter(progress, report.name)
    findings = list(report.findings)
    as_written, _ = measured_version(VersionText("written", "", ""), report, None, settings)
    # Findings about the same arguments (SL201 and SL203 on one state value) get one answer, solved once.
    answers: dict[tuple[tuple[int, ...], ...], tuple] = {}
    once: dict[str, object] = {}  # suggest's baseline versions compiled: one program each, whatever the finding
    for k in wanted:
        f = findings[k]
        named = named_units(f, inputs)
        units = with_axis_holders(named, inputs)
        key = tuple(map(tuple, units))
        if key not in answers:
            if len(answers) >= MAX_SOLVER_FIXES:
                continue
            answers[key] = _advice(target, units, named, report, module, sig, settings, where, devices, counter, spec,
                                   as_written, base, once)
        findings[k] = _advised(f, sorted(i for unit in units for i in unit), report, target, *answers[key])
    return report.model_copy(update={"findings": findings})


def _advice(target, units, named, report, module, sig, settings, where, devices, counter, spec, as_written, base,
            once):
    """(the chosen candidate's arguments, its label, its check, its name), or Nones where suggest keeps them.

    The single moves do not depend on the solve: they compile side by side while this thread solves (XLA
    releases the GIL while it compiles), and the solver's choice compiles once solved, unless it is one of
    them."""
    inputs = list(report.inputs)

    def label(name: str, e: dict[int, Sharding]) -> str:
        return f"{_change_text(e, inputs, returned_state(target, e))} ({name})"

    def edit(e: dict[int, Sharding]) -> EntryEdit:
        return entry_edit(sig, e, _state_results(target, report, e))

    def job(e: dict[int, Sharding]):
        text = with_entry_shardings(module, _state_results(target, report, e), sig.mesh_name, e)
        return functools.partial(compiled_candidate, report.name, text, sig, settings, where, devices, edit(e))

    moves = single_move_candidates(target, units, report)
    # suggest's baseline versions: suggest recommends a baseline's layout for a value where that version wins.
    baselines = [(n, e) for n, e in baseline_candidates(target, report) if all(e != m for _, m in moves)]
    workers = os.cpu_count() or 1
    # A worker more than the cores: the solver's choice starts compiling as soon as it is solved, beside the
    # moves still compiling, instead of waiting alone for a core after them.
    with ThreadPoolExecutor(max_workers=workers + 1 if workers > 1 else 1, thread_name_prefix="solver-fix") as pool:
        pending: dict[str, Future] = {}
        reused: dict[str, Future] = {}

        def start(named: list[tuple[str, dict[int, Sharding]]], what: str) -> None:
            # A candidate that is a program already compiled (a state fix's) is not compiled again to be ranked.
            for n, e in named:
                if (same := same_program(edit(e))) is not None or (same := once.get(_key(e))) is not None:
                    reused[_key(e)] = pending[_key(e)] = finished(same)
                    counter.same(label(n, e))
            named = [(n, e) for n, e in named if _key(e) not in reused]
            done = counter.announce([label(n, e) for n, e in named], what)
            for (_, e), then in zip(named, done):
                pending[_key(e)] = pool.submit(outcome, job(e), then)

        if workers > 1:  # one core: the moves compile after the solve, as before
            start(moves, "to check suggest's single moves")
            start(baselines, "to check suggest's baseline layouts")
            # The layout the step returns the named arguments in does not depend on the solve either: it
            # compiles beside the moves (a layout the solver then chooses is this compile, not another).
            returned = returned_layout(target, named, report)
            if returned and all(returned != e for _, e in moves):
                start([(RETURNED, returned)], "to check the layout the step returns them in")
        candidates = candidate_layouts(target, units, report, spec, moves + baselines, named)
        start([(n, e) for n, e in candidates if _key(e) not in pending], "to check suggest's layouts")
        compiled = [pending[_key(e)].result() for _, e in candidates]
    once.update({_key(e): r for (n, e), r in zip(candidates, compiled) if n in BASELINES})  # the same each answer
    labels = [label(name, e) for name, e in candidates]
    written = rematerializations(report)
    versions = [as_written] + [
        with_rematerializations(measured_version(
            VersionText(name, "", ""), None if isinstance(r, BaseException) else r,
            str(r) if isinstance(r, BaseException) else None, settings)[0],
            None if isinstance(r, BaseException) else r, written)
        for (name, _), r in zip(candidates, compiled)]
    # A layout XLA compiles with a rematerialization the program as written lacks ranks below every other
    # (suggest's rule, its resolution too); where none beats the written one, the one that would have is
    # checked all the same, so the finding says what XLA does with it.
    best = advised_version(versions, time_resolution(spec, sig))
    if best is None or best.name == "written":
        best = best_version(versions, time_resolution(spec, sig))
    if best is None or best.name == "written":
        return None, None, None, None
    at = [name for name, _ in candidates].index(best.name)
    chosen = candidates[at][1]
    if _key(chosen) in reused:  # the fix printed is compiled itself, and measured from its own compile
        [then] = counter.announce([labels[at]], "to check the layout chosen")
        compiled[at] = outcome(job(chosen), then)
    return chosen, labels[at], measured_check(labels[at], compiled[at], base, sig, written), best.name


def _advised(f: Finding, free: list[int], report: TargetReport, target, edits, label, check, name,
             ) -> Finding:
    inputs = list(report.inputs)
    check = for_finding(f, check) if check is not None else None
    if check is None:
        # Nothing moves: the arguments it was free to move are named only where few (a Llama's were 46).
        free_text = _listed(inputs, free) if len(free) <= 3 else f"{len(free)} arguments"
        return f.model_copy(update={"fix": f"{f.fix}; suggest keeps every argument as written (free to move "
                                           f"{free_text}, it found no better layout)"})
    if check.verdict is FixVerdict.better:
        returned = returned_state(target, edits)
        results = _state_results(target, report, edits)
        left = tuple(inputs[rt.input.index].path for rt in target.state if rt.output.index not in results)
        return _better(f, check, edits, inputs, returned, len(results) - len(returned), name, left,
                       tuple(target.problem.free_axes))
    return f.model_copy(update={
        "fix": f"{f.fix}; the best layout the sharding solver and single moves give these arguments, {label}, "
               f"was tried too, compiled and {not_offered_text(check)}"})


def _listed(inputs: list[TensorInfo], indices: list[int]) -> str:
    return ", ".join(inputs[i].path for i in indices)

