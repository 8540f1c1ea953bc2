"""A fix that moves a tensor-parallel pair together: SL103's weight onto the dimension its matmul produces
(column-parallel) and, with it, the weight whose matmul reads that output onto the dimension it contracts
(row-parallel), each with its optimizer state, as a person lays out Megatron's pair.

Moving the first weight alone hands the second matmul a split input: where the second weight is sharded on the
dimension it produces (transformers' Flax ViT laid out by a newcomer: the MLP's output dense on its output
features), the step gathers it back and measures a trade-off; the pair measures better (issue 46). The
finding's ``candidates`` carry each weight's partner (passes/rules/sl103_expanding_partial_sum.py); the fix
checks compile, in order, every pair together, then each partner's pair alone (a finding covers weights of
several pairs: an MLP's up projection and attention's q, k and v), then the move of the finding's weights alone.
Where the finding names several pairings, each is compiled and the measured best printed (``best_pairing``: on the
ViT the MLP pair alone, peak -31.0 MiB and traffic -16.2 MiB, where every pair together is a trade-off); else the
first measured better (fix_checks.py).
"""

from __future__ import annotations

from typing import TypeVar

from ...passes.common.sharding_text import normalized, pspec_text
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, FixCandidate, TensorInfo
from .fix_verdicts import cost_text, not_offered_text
from .parameter_moves import key_path, listed, matcher, mirrors


def pair_attempts(f: Finding, inputs: list[TensorInfo]) -> list[tuple[Finding, list[FixCandidate]]]:
    """(the finding as the attempt presents it, the partners it moves with its weights), in the order the fix
    checks compile them; the finding alone, unchanged, where it names no pair."""
    pairs = [c for c in f.candidates if c.together and c.sharding == f.suggested_sharding]
    if not pairs or f.parameter is None or f.suggested_sharding is None:
        return [(f, [])]
    named = f.parameters or [f.parameter]
    every: list[FixCandidate] = []
    groups: dict[str, tuple[list[str], list[FixCandidate]]] = {}
    for c in pairs:
        for t in c.together:
            if t not in every:
                every.append(t)
        weights, partners = groups.setdefault(repr(c.together), ([], c.together))
        weights.append(c.value)
    out = [(_attempt(f, named, every, inputs), every)]
    # Each pair alone: the others' layouts may be what makes the whole move a trade-off; so may the finding's
    # weights with no partner, moved with the pair (BERT laid out naively: q, k and v beside the MLP's pair).
    if len(groups) > 1 or any(set(named) - set(weights) for weights, _ in groups.values()):
        for weights, partners in groups.values():
            ordered = [p for p in named if p in weights] or weights
            out.append((_attempt(f, ordered, partners, inputs), partners))
    return out + [(f, [])]


Compiled = TypeVar("Compiled")
# A finding's further tensor-parallel pairings compiled (each pair alone beside every pair together): they do
# not draw on fix_checks.MAX_CHECKS, so a finding of several pairs leaves the state fixes their checks.
MAX_PAIRINGS = 2



def best_pairing(pairings: list[tuple[Finding, Compiled, FixCheck]]) -> tuple[Finding, Compiled, FixCheck]:
    """The pairing a finding prints among those compiled (every pair together, each pair alone): measured better
    first, then the larger fall of peak and traffic together; on a tie the first compiled."""
    return min(pairings, key=lambda p: (p[2].verdict is not FixVerdict.better, p[2].peak_delta + p[2].traffic_delta))


def rival_pairings(attempts: list[tuple[Finding, list[FixCandidate], Compiled]]) -> list[Compiled]:
    """A finding's other pairings, where it names several (every pair together, then each alone): each is
    compiled beside the first, outside the fix checks' budget, and the measured best printed."""
    return [c for _, t, c in attempts[1:] if t and len(attempts) > 2][:MAX_PAIRINGS]


def pairing_tried(check: FixCheck) -> str:
    """What a pairing compiled beside the one printed measured."""
    if check.verdict is FixVerdict.better:
        return f"; {check.change} was compiled too and measured better by less ({cost_text(check)})"
    return f"; {check.change} was tried too, compiled and {not_offered_text(check)}"


def _attempt(f: Finding, weights: list[str], partners: list[FixCandidate], inputs: list[TensorInfo]) -> Finding:
    spec = f.suggested_sharding or []
    written = pspec_text(f.parameter_sharding or [])
    moved = "; ".join(
        f"{t.value}" + (f" {pspec_text(w)}" if (w := _written(t.value, inputs)) is not None else "")
        + f" as {pspec_text(t.sharding)}" for t in partners)
    fix = (f"shard {listed(weights)} as {pspec_text(spec)} (the dimension {'its' if len(weights) == 1 else 'their'} "
           f"matmul produces: column-parallel) instead of {written}, together with {moved} (the dimension the "
           "matmul reading that output contracts: row-parallel), a tensor-parallel pair: the activation between "
           "the two matmuls stays split and only the pair's output is summed")
    return f.model_copy(update={"parameter": weights[0], "parameters": weights if len(weights) > 1 else [],
                                "fix": fix})


def _written(pattern: str, inputs: list[TensorInfo]) -> list[list[str]] | None:
    whole = matcher(pattern)
    return next((t.sharding or [] for t in inputs if whole.match(t.path)), None)


def partner_edits(partners: list[FixCandidate], inputs: list[TensorInfo]) -> dict[int, list[list[str]]] | None:
    """Argument -> its new layout for every argument a partner names that does not have it already; None where a
    partner names no argument."""
    edits: dict[int, list[list[str]]] = {}
    for t in partners:
        whole = matcher(t.value)
        named = [x for x in inputs if whole.match(x.path)]
        if not named:
            return None
        edits.update({x.index: t.sharding for x in named
                      if normalized(x.sharding, len(x.shape)) != normalized(t.sharding, len(x.shape))})
    return edits


Edits = dict[int, list[list[str]]]


def pair_change(f: Finding, together: list[FixCandidate], inputs: list[TensorInfo], edits: Edits, partners: Edits,
                arguments: Edits) -> tuple[str, tuple[str, ...]]:
    """The change a pair candidate compiles, each move's optimizer state named after it (the oracle, and a reader,
    give each path the layout its move names), and that state's paths."""
    by_index = {t.index: t.path for t in inputs}
    moves = [(f.parameters or [f.parameter or ""], edits, f.suggested_sharding or [])] + [
        ([t.value], {i: s for i, s in partners.items() if matcher(t.value).match(by_index[i])}, t.sharding)
        for t in together]
    texts: list[str] = []
    mirrored: list[str] = []
    for names, own, spec in moves:
        # Each layer's state named as its weight is, by the layer pattern (the weights' moments: 2 per weight).
        state = list(dict.fromkeys(
            _state_pattern(by_index[j], by_index[i], names) for i in sorted(own) for j in mirrors(inputs, i)
            if j in arguments and j not in edits and j not in partners))
        mirrored += state
        texts.append(", ".join(names) + (f" with {listed(state)}" if state else "") + f" -> {pspec_text(spec)}")
    return " together with ".join(texts), tuple(mirrored)


def _state_pattern(state: str, leader: str, names: list[str]) -> str:
    """``state`` (a moment of ``leader``: the same key path under another argument) with its key path written as
    the pattern among ``names`` that names ``leader`` (every layer's moment once, ``[*]``)."""
    name = next((n for n in names if matcher(n).match(leader)), leader)
    own = key_path(leader)
    return state[:len(state) - len(own)] + key_path(name) if own and state.endswith(own) else state
