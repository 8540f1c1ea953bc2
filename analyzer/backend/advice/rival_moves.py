"""A finding whose own fix (a parameter's new sharding) was measured better, compared with suggest's other
single moves of the same value: one recommendation per value (issue 46).

The rule's fix is one of the single moves ``suggest`` compiles (advice/moves.py: the same move, with the
optimizer state that mirrors it). A fix measured better than the program as written can still be a worse
layout for that value than another single move suggest ranks first: ott's Sinkhorn with both point clouds
split on their feature dimension, where SL103 moves x to its rows (2.5 GiB, y still gathered), and suggest's
single move gives y the rows and replicates x (1.0 GiB). So the single moves of suggest's candidate set that
move the finding's parameter (``single_moves`` as suggest calls it, over every argument, the first
``MAX_RIVALS`` of them after the rule's own) are compiled beside it (the rule's own program is its check's
compile, read back, not compiled again) where another argument holds a mesh axis the parameter holds: the case
the rule's fix, which moves the parameter alone, leaves open (elsewhere nothing is compiled: the main example,
value_function_step). The one suggest's rule prefers (``moves.best_move``, against the
program as written) is printed where it is not the rule's own and its check measures it better; the finding
then says what the rule's own fix measured. A finding whose fix is no single move of suggest's (a layer
pattern, a tensor-parallel pair) or was not measured better is left as it is: nothing is compiled for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ....passes.common.sharding_text import normalized, pspec_text
from ....passes.models.fix_check import FixVerdict
from ....passes.models.report import Finding, TargetReport, TensorInfo
from ....passes.pipelines.catalogue import PARAMETER_FIXES, STATE_RULES
from ....passes.pipelines.entry import entry_signature, state_roundtrips
from ....passes.pipelines.fix_checks import FIX_CHECKS
from ....passes.pipelines.suggest import time_resolution
from ...adapter import jax_adapter
from ...context.config import Settings
from ...supervision import isolation
from ..candidate_compile import compiled_candidate
from ..fix_verdicts import baseline, cost_text, for_finding, measured_check, rematerializations
from ..parameter_moves import listed, matcher, returning_state, returns_text, single_move, state_returns
from ..sharding_edits import with_entry_shardings
from ..side_by_side import CompileCounter, compile_side_by_side, entry_edit, same_program
from .moves import Move, best_move, single_moves
from .verdict import VersionText, measured_version

# The other single moves of a finding's parameter compiled beside its fix (suggest's order: the largest
# argument's first), and the findings compared per target (findings about one parameter share their moves).
MAX_RIVALS = 4
MAX_FINDINGS = 2


def with_rival_moves(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                     progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each finding whose own single move was measured better given suggest's best single move
    of the same value where that is another one, measured better too (see the module's docstring)."""
    inputs = list(report.inputs)
    wanted = [k for k, f in enumerate(report.findings) if f.rule in PARAMETER_FIXES and f.rule not in STATE_RULES
              and f.fix_check is not None and f.fix_check.verdict is FixVerdict.better
              and f.parameter is not None and f.suggested_sharding is not None and len(f.parameters) <= 1]
    if not wanted or report.memory is None:
        return report
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    free = [a for a, n in sig.mesh.axes if n > 1]
    if not free or not sig.mesh_name:
        return report
    returned = state_returns({rt.output.index: rt.input.index for rt in state_roundtrips(sig, FIX_CHECKS)},
                             report.inputs, report.outputs)
    written = {t.index: [list(a) for a in (t.sharding or [[] for _ in t.shape])] for t in inputs}
    # suggest's candidate set (its call of single_moves, no argument fixed), the moved state returned as lint's
    # fix checks return it (parameter_moves.returning_state).
    moves = [Move(m.description, m.pins, m.moved, returning_state(inputs, returned, m.moved))
             for m in single_moves(inputs, written, free, dict(sig.mesh.axes), set(), dict(returned))]
    findings = list(report.findings)
    counter = CompileCounter(progress, report.name)
    base, remats = baseline(report, sig), rematerializations(report)
    as_written, _ = measured_version(VersionText("written", "", ""), report, None, settings)
    resolution = time_resolution(settings.solver_device_spec, sig)
    answers: dict[str, tuple[Move, TargetReport] | None] = {}  # the rule's own move -> suggest's best of its value
    for k in wanted:
        f = findings[k]
        own = _own_move(f, inputs, returned, moves)
        if own is None:
            continue
        if own.description not in answers:
            rivals = [m for m in moves if m is not own and _changes(m, own.moved, written)][:MAX_RIVALS]
            if len(answers) >= MAX_FINDINGS or not rivals or not _shares_an_axis(own, inputs, written):
                continue
            isolation.phase(where, "compiling suggest's single moves of a fixed parameter to compare them")
            candidates = [own, *rivals]
            compiled = _compiled(candidates, report, module, sig, settings, where, devices, counter)
            ok = [(m, r) for m, r in zip(candidates, compiled) if not isinstance(r, BaseException)]
            best = best_move([m for m, _ in ok], [measured_version(VersionText(m.description, "", ""), r, None,
                                                                   settings) for m, r in ok],
                             resolution, remats, as_written) if ok else None
            answers[own.description] = (best[0], next(r for m, r in ok if m is best[0])) if best else None
        answer = answers[own.description]
        if answer is None or answer[0] is own:
            continue
        move, after = answer
        check = for_finding(f, measured_check(_change(move, inputs), after, base, sig, remats))
        if check.verdict is FixVerdict.better:
            findings[k] = _advised(f, move, check, inputs, returned)
    return report.model_copy(update={"findings": findings})


def _own_move(f: Finding, inputs: list[TensorInfo], returned, moves: list[Move]) -> Move | None:
    """The single move of suggest's set that is the finding's fix (its parameter, and the optimizer state that
    mirrors it, on its suggested sharding), or None where the fix is none of them."""
    whole = matcher(f.parameter or "")
    named = [t for t in inputs if whole.match(t.path)]
    if len(named) != 1 or f.suggested_sharding is None:
        return None
    arguments, _ = single_move(inputs, returned, {named[0].index: f.suggested_sharding})
    want = {i: normalized(s, len(inputs[i].shape)) for i, s in arguments.items()}
    return next((m for m in moves if {i: normalized(s, len(inputs[i].shape)) for i, s in m.moved.items()} == want),
                None)


def _shares_an_axis(own: Move, inputs: list[TensorInfo], written) -> bool:
    """Whether another argument holds a mesh axis the moved parameter holds as written: the one case its rule's
    fix, which moves that parameter alone, cannot settle (the other cloud left split on the features the cost
    matrix contracts), and the one where the rivals are compiled; elsewhere nothing is."""
    axes = {a for i in own.moved for dim in written[i] for a in dim}
    return any(a in axes for t in inputs if t.index not in own.moved for dim in written[t.index] for a in dim)


def _changes(m: Move, values, written) -> bool:
    """Whether the move changes one of ``values`` (the finding's parameter and its optimizer state)."""
    return any(i in m.moved and m.moved[i] != written[i] for i in values)


def _compiled(candidates: list[Move], report: TargetReport, module, sig, settings: Settings, where: str,
              devices: list, counter: CompileCounter) -> list:
    """Each move's compile, side by side: one that is a program compiled before (the rule's own fix, checked by
    the parameter fixes) read back, not compiled again."""
    inputs = list(report.inputs)
    out: list = [None] * len(candidates)
    todo = []
    for n, m in enumerate(candidates):
        edit = entry_edit(sig, m.moved, m.results)
        if (same := same_program(edit)) is not None:
            out[n] = same
            counter.same(_change(m, inputs))
            continue
        text = with_entry_shardings(module, m.results, sig.mesh_name or "mesh", m.moved)
        todo.append((n, functools.partial(compiled_candidate, report.name, text, sig, settings, where, devices, edit)))
    done = counter.announce([_change(candidates[n], inputs) for n, _ in todo],
                            "to compare suggest's single moves of the same value")
    for (n, _), r in zip(todo, compile_side_by_side([job for _, job in todo], done)):
        out[n] = r
    return out


def _change(m: Move, inputs: list[TensorInfo]) -> str:
    by_spec: dict[str, list[str]] = {}
    for i, s in sorted(m.moved.items()):
        by_spec.setdefault(pspec_text(s), []).append(inputs[i].path)
    return ", ".join(f"{', '.join(paths)} -> {spec}" for spec, paths in by_spec.items())


def _advised(f: Finding, move: Move, check, inputs: list[TensorInfo], returned) -> Finding:
    """The finding with suggest's single move as its fix, saying what the rule's own fix measured."""
    by_change: dict[tuple[str, str], list[str]] = {}
    for i, s in sorted(move.moved.items(), key=lambda e: (inputs[e[0]].path != f.parameter, e[0])):
        by_change.setdefault((pspec_text(s), pspec_text(inputs[i].sharding or [])), []).append(inputs[i].path)
    instead = "; ".join(f"{listed(paths)} as {new} instead of {old}" for (new, old), paths in by_change.items())
    back = sum(1 for i in returned.values() if i in move.moved)
    own = f.fix_check
    assert own is not None
    subject = next(t for t in inputs if t.path == f.parameter)
    return f.model_copy(update={
        "fix_check": check, "suggested_sharding": move.moved.get(subject.index),
        "fix": (f"shard {instead}{returns_text(back, len(move.results) - back)} (checked: {cost_text(check)}): "
                f"suggest's single move for {f.parameter}, the best by suggest's rule of its single moves, "
                f"compiled beside the rule's own fix ({own.change}, checked: {cost_text(own)})")})
