"""The fix of SL105's finding about a resharding collective no argument of the step explains (its message ends in
``NO_ARGUMENT`` of SL105's rule: no argument is its operand or the weight it serves), compiled: suggest's single moves
(advice/moves.py) that put the collective's mesh axes on an argument not split on them, compiled beside the
program as written, and the one suggest's own rule prefers (``advice.moves.best_move``, then
``advice.verdict.advised_version`` against the written shardings) printed with the argument it moves named,
only where measured better. Otherwise the rule's generic text stays, marked advice: no fix is printed unchecked.

Why the collective's axes: XLA spends an axis that splits no argument on the ops' own work and then reshards
over it (jax-md's dense neighbour list on a 4x2 mesh, newbie19b F1: the replicated s32[N,128] table ``idx``
makes XLA split the gather over the idle axis 'q' and all-reduce its f32[N/4,128,3] result, 96% of the step's
traffic). A move that gives an argument that axis is what suggest finds (``idx: P() -> P(('p', 'q'))``); one
that takes it elsewhere does not remove a collective over it. The moves are ranked as suggest ranks arguments,
the largest first, the layout over the most devices first, and at most ``MOVES_CHECKED`` are compiled."""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import cast

from ...passes.common.shapes import array_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixVerdict
from ...passes.models.report import Finding, TargetReport
from ...passes.models.suggest import Version
from ...passes.pipelines.entry import entry_signature, state_roundtrips
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ...passes.pipelines.suggest import time_resolution
from ...passes.pipelines.unattributed_reshards import is_unattributed, without_no_argument
from ..adapter import jax_adapter
from ..context.config import Settings
from ..supervision import isolation
from .advice.moves import Move, best_move, single_moves
from .advice.verdict import VersionText, advised_version, measured_version
from .candidate_compile import compiled_beside_written
from .fix_verdicts import baseline, cost_text, for_finding, measured_check, not_offered_text, rematerializations
from .parameter_moves import returns_text, state_returns
from .sharding_edits import with_entry_shardings

# suggest's single moves compiled per finding (each a compile of the whole step); findings over the same axes
# share them.
MOVES_CHECKED = 3
# What the rule's generic fix is marked with where no move was measured better (or none could be compiled).
ADVICE = " (advice, not checked)"


def _bare(label: str) -> str:
    return label.split(":")[0]


def _moves_onto(moves: list[Move], inputs, axes: set[str], sizes: dict[str, int]) -> list[Move]:
    """The moves that give an argument one of ``axes`` it does not have as written, the largest argument's and
    the layout over the most devices first."""
    by_index = {t.index: t for t in inputs}

    def adds(m: Move) -> bool:
        return any(axes & {_bare(a) for d in s for a in d} - {_bare(a) for d in (by_index[i].sharding or [])
                                                                for a in d} for i, s in m.moved.items())

    def rank(m: Move) -> tuple:
        size = max(array_bytes(by_index[i].dtype, list(by_index[i].shape)) for i in m.moved)
        spread = max(prod(sizes.get(_bare(a), 1) for d in s for a in d) for s in m.moved.values())
        return (-size, -spread)

    return sorted((m for m in moves if adds(m)), key=rank)


def check_unattributed_reshards(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                                progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each SL105 finding no argument explains given the measured best of suggest's single
    moves onto the collective's axes, or its generic fix marked advice."""
    found = [k for k, f in enumerate(report.findings) if is_unattributed(f)]
    if not found:
        return report
    findings = list(report.findings)
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    sizes = dict(sig.mesh.axes)
    free = [a for a, n in sig.mesh.axes if n > 1]
    by_name = {c.hlo_name: c for c in report.collectives}
    inputs = list(report.inputs)
    written = {t.index: [list(a) for a in (t.sharding or [[] for _ in t.shape])] for t in inputs}
    returned = state_returns({rt.output.index: rt.input.index for rt in state_roundtrips(sig, FIX_CHECKS)},
                             inputs, report.outputs)
    moves = single_moves(inputs, written, free, sizes, set(), returned) if sig.mesh_name else []
    answers: dict[frozenset[str], tuple] = {}
    for k in found:
        f = findings[k]
        c = by_name.get(f.subject or "")
        axes = frozenset(_bare(a) for a in (c.mesh_axes if c is not None else ()))
        candidates = _moves_onto(moves, inputs, set(axes), sizes)[:MOVES_CHECKED]
        if not candidates:
            findings[k] = f.model_copy(update={"fix": (f.fix or "") + ADVICE})
            continue
        if axes not in answers:
            isolation.phase(where, "compiling suggest's single moves onto the axes of a collective no argument "
                                   "explains")
            answers[axes] = _measured(candidates, report, text, module, sig, settings, where, devices, progress)
        findings[k] = _checked(f, inputs, *answers[axes])
    return report.model_copy(update={"findings": findings})


def _measured(moves: list[Move], report: TargetReport, text: str, module, sig, settings: Settings, where: str,
              devices: list, progress) -> tuple:
    """(the moves, their compiles, the one suggest's rule keeps or None, the written step's figures)."""
    edited = [(m.description, with_entry_shardings(module, m.results, sig.mesh_name or "mesh", m.moved))
              for m in moves]
    before, after = compiled_beside_written(report, text, edited, sig, settings, where, devices, progress)
    remats = rematerializations(before)
    as_written, _ = measured_version(VersionText("written", "", ""), before, None, settings)
    ok = [(m, a) for m, a in zip(moves, after, strict=True) if not isinstance(a, BaseException)]
    best = best_move([m for m, _ in ok], [measured_version(VersionText(m.description, "", ""), a, None, settings)
                                          for m, a in ok], time_resolution(settings.solver_device_spec, sig),
                     remats, as_written) if ok else None
    kept = None
    if best is not None:
        chosen = cast(Version, best[1])
        if advised_version([as_written, chosen], time_resolution(settings.solver_device_spec, sig),
                           as_written) is chosen:
            kept = moves.index(best[0])
    return moves, after, kept, baseline(before, sig), sig, remats


def _checked(f: Finding, inputs, moves: list[Move], after: list, kept: int | None,
             base, sig, remats) -> Finding:
    if kept is not None:
        m = moves[kept]
        check = for_finding(f, measured_check(m.description, after[kept], base, sig, remats))
        if check.verdict is FixVerdict.better:
            [(i, spec)] = list(m.moved.items())[:1]
            t = inputs[i]
            # The state it does not move is returned on its input's layout, as suggest's single move pins it.
            back = returns_text(0, len(m.results)) if m.results else ""
            return f.model_copy(update={
                "fix_check": check, "parameter": t.path, "parameter_sharding": t.sharding, "suggested_sharding": spec,
                "message": without_no_argument(f.message) + (
                    f": measured, it comes from {t.path} {pspec_text(t.sharding or [])}: moving that argument alone "
                    "cuts it (suggest's single move, compiled)"),
                "fix": (f"shard {t.path} as {pspec_text(spec)} instead of {pspec_text(t.sharding or [])}{back} "
                        f"(checked: {cost_text(check)}): suggest's single move, the best of "
                        f"{len(moves)} moves onto the collective's axes")})
    tried = "; ".join(f"{m.description}: {not_offered_text(measured_check(m.description, a, base, sig, remats))}"
                      for m, a in zip(moves, after, strict=True))
    return f.model_copy(update={"fix": f"{f.fix}{ADVICE}; suggest's single moves onto the collective's axes were "
                                       f"compiled and none is better ({tried})"})
