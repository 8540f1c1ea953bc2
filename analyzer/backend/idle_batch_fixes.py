"""The fix of SL105's finding about a batch that leaves mesh axes idle (passes/rules/idle_batch_axes.py) and of
SL207's (an idle mesh axis), compiled: the batch arguments it names given suggest's data-parallel layout
(dimension 0 over every mesh axis of several devices, passes/common/data_parallel.py; a vmapped batch's
dimension where the step's matmuls batch over one), nothing else changed (no
output pinned: the user pastes the batch's new PartitionSpec and nothing more), compiled beside the program as
written and beside the first ``MOVES_CHECKED`` of suggest's single moves of a mesh axis among the same arguments
(advice/moves.py). The one suggest's own rule prefers (``advice.moves.best_move``, which suggest applies to its
single moves, the batch on every axis among them) is the fix, printed only measured better; otherwise the
finding says what the batch on every axis was tried at and cost. One rule over the same layouts: lint's fix for
the batch and suggest's single move are the same layout (a blackjax sampler's X moved alone, newbie17)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixVerdict
from ...passes.models.report import Finding, TargetReport
from ...passes.models.suggest import Version
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ...passes.pipelines.idle_batch import batch_layouts, is_idle_batch_finding
from ...passes.pipelines.suggest import SUGGEST, time_resolution
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..supervision import isolation
from .advice.moves import NAME, Move, best_move, single_moves
from .advice.problem import problem_of_text
from .advice.solver_candidates import Sharding, whole_layout_choice
from .advice.verdict import VersionText, advised_version, measured_version, with_rematerializations
from .candidate_compile import compiled_beside_written
from .fix_verdicts import baseline, cost_text, for_finding, measured_check, not_offered_text, rematerializations
from .parameter_moves import listed, returning_state, state_returns
from .sharding_edits import with_entry_shardings

# suggest's single moves among the batch arguments compiled beside the batch on every axis (the first ones:
# the largest argument's, as suggest orders them).
MOVES_CHECKED = 3
# The candidate that is suggest's solver version (every argument free).
SOLVER = "solver"


def check_idle_batch_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                           progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each idle-batch finding's fix compiled: printed with its figures where measured better,
    else the finding says what it cost."""
    found = [k for k, f in enumerate(report.findings) if is_idle_batch_finding(f) and f.fix_check is None]
    if not found:
        return report
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    sizes = dict(sig.mesh.axes)
    free = [a for a, n in sig.mesh.axes if n > 1]
    inputs = list(report.inputs)
    by_path = {t.path: t for t in inputs}
    findings = list(report.findings)
    isolation.phase(where, "compiling the batch on every mesh axis and suggest's layouts to check them")
    # The solve does not depend on the moves: it runs while they compile (XLA releases the GIL as it compiles).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="idle-axis-solve") as pool:
        solving = pool.submit(_solver_layout, report, text, settings, where, module)
        for k in found:
            f = findings[k]
            named = [by_path[p] for p in f.parameters or [f.parameter or ""] if p in by_path]
            moved = batch_layouts(module, named, free, sizes)  # each on its batch dimension, as the finding chose it
            if not named or len(moved) != len(named):
                continue
            findings[k] = _checked(f, named, moved, report, text, module, sig, settings, where, devices, progress,
                                   solving)
    return report.model_copy(update={"findings": findings})


def _checked(f: Finding, named, moved, report: TargetReport, text: str, module, sig, settings: Settings, where: str,
             devices: list, progress, solving: Future) -> Finding:
    """The finding with its fix chosen among the batch on every axis (``moved``: ``named``'s layouts), suggest's
    single moves among ``named`` and the solver's layout (``solving``), checked as a fix check measures it."""
    inputs = list(report.inputs)
    sizes = dict(sig.mesh.axes)
    free = [a for a, n in sig.mesh.axes if n > 1]
    written = {t.index: [list(a) for a in (t.sharding or [[] for _ in t.shape])] for t in inputs}
    specs = [pspec_text(moved[t.index]) for t in named]
    change = (f"{', '.join(t.path for t in named)} -> {specs[0]}" if len(set(specs)) == 1
              else ", ".join(f"{t.path} -> {s}" for t, s in zip(named, specs, strict=True)))
    held = {t.path for t in inputs if t not in named}
    moves = [Move(change, {**written, **moved}, moved, {})] + [
        m for m in single_moves(inputs, written, free, sizes, held) if m.moved != moved][:MOVES_CHECKED]
    labels = [change] + [_change(m, inputs) for m in moves[1:]]
    edited = [with_entry_shardings(module, m.results, sig.mesh_name or "mesh", m.moved) for m in moves]
    before, after = compiled_beside_written(report, text, list(zip(labels, edited)), sig, settings, where,
                                            devices, progress)
    edits, results = solving.result()
    solver = [Move(SOLVER, {**written, **edits}, edits, results)] if edits and all(
        m.moved != edits for m in moves) else []
    if solver:
        labels.append(_change(solver[0], inputs))
        after += compiled_beside_written(before, text, [(labels[-1], with_entry_shardings(
            module, results, sig.mesh_name or "mesh", edits))], sig, settings, where, devices, progress)[1]
    base, remats = baseline(before, sig), rematerializations(before)
    own = for_finding(f, measured_check(change, after[0], base, sig, remats))
    at = _chosen(moves, after, bool(solver), before, sig, settings, remats)
    check = for_finding(f, measured_check(labels[at], after[at], base, sig, remats)) if at else own
    if at and check.verdict is FixVerdict.better:
        m = (moves + solver)[at]
        whose = ("suggest's choice, the sharding solver's layout with every argument free"
                 if m.description == SOLVER else "suggest's single move for the batch arguments")
        return f.model_copy(update={
            "fix_check": check, "suggested_sharding": m.moved.get(named[0].index),
            "fix": (f"shard {_instead(m, inputs)} (checked: {cost_text(check)}): {whose}, chosen by suggest's "
                    f"rule over the batch on every mesh axis ({change}: {_said(own)})")})
    if own.verdict is FixVerdict.better:
        return f.model_copy(update={"fix_check": own, "suggested_sharding": moved[named[0].index],
                                    "fix": f"{f.fix} (checked: {cost_text(own)})"})
    return f.model_copy(update={
        "fix_check": own,
        "fix": f"no sharding change found that helps: the batch on every mesh axis ({change}) was tried, "
               f"compiled and {not_offered_text(own)}"})


def _solver_layout(report: TargetReport, text: str, settings: Settings, where: str, module,
                   ) -> tuple[dict[int, Sharding], dict[int, Sharding]]:
    """(the arguments suggest's solver changes with every argument free, the state results pinned to their new
    layout as suggest pins them); empty where there is no problem to solve or the solver keeps them."""
    sig = entry_signature(module, SUGGEST)
    if sig.mesh.size <= 1 or not sig.mesh_name:
        return {}, {}
    try:
        target = problem_of_text(report.name, text, (), settings, lambda _sig: {}, where)
    except ShardLintInputError:
        return {}, {}
    edits = whole_layout_choice(target, report, settings.solver_device_spec)
    returned = state_returns({rt.output.index: rt.input.index for rt in target.state}, report.inputs, report.outputs)
    return edits, (returning_state(report.inputs, returned, edits) if edits else {})


def _chosen(moves: list[Move], after: list, solved: bool, before: TargetReport, sig, settings: Settings,
            remats) -> int:
    """The candidate suggest's rule keeps (its index; 0, the batch on every axis, where it keeps the written
    shardings): the best single move (``best_move``), then that or the solver's layout (the last candidate where
    ``solved``) against the written shardings (``advised_version``), as suggest ranks its versions."""
    resolution = time_resolution(settings.solver_device_spec, sig)
    as_written, _ = measured_version(VersionText("written", "", ""), before, None, settings)
    ok = [(k, m, a) for k, (m, a) in enumerate(zip(moves, after)) if not isinstance(a, BaseException)]
    versions = [as_written]
    best = best_move([m for _, m, _ in ok], [measured_version(VersionText(m.description, "", ""), a, None, settings)
                                             for _, m, a in ok], resolution, remats, as_written) if ok else None
    if best is not None:
        versions.append(cast(Version, best[1]).model_copy(update={"name": NAME}))
    solver = after[len(moves)] if solved else None
    if solver is not None and not isinstance(solver, BaseException):
        versions.append(with_rematerializations(
            measured_version(VersionText(SOLVER, "", ""), solver, None, settings)[0], solver, remats))
    chosen = advised_version(versions, resolution, as_written)
    if chosen is None or chosen.name == "written":
        return 0
    if chosen.name == SOLVER:
        return len(moves)
    return moves.index(best[0]) if best is not None else 0


def _said(check) -> str:
    return f"checked: {cost_text(check)}" if check.verdict is FixVerdict.better else not_offered_text(check)


def _change(m: Move, inputs) -> str:
    by_spec: dict[str, list[str]] = {}
    for i, s in sorted(m.moved.items()):
        by_spec.setdefault(pspec_text(s), []).append(inputs[i].path)
    return ", ".join(f"{', '.join(paths)} -> {spec}" for spec, paths in by_spec.items())


def _instead(m: Move, inputs) -> str:
    by_change: dict[tuple[str, str], list[str]] = {}
    for i, s in sorted(m.moved.items()):
        by_change.setdefault((pspec_text(s), pspec_text(inputs[i].sharding or [])), []).append(inputs[i].path)
    return "; ".join(f"{listed(paths)} as {new} instead of {old}" for (new, old), paths in by_change.items())
