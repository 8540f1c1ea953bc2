"""Predictions against the compiled program: which collectives XLA's partitioner
bears out, and for each it does not, what it compiled instead.

A prediction is what the propagated shardings imply if every op computes in its
propagated layout. XLA's SPMD partitioner may pick another strategy for an op
(gather the smaller operand instead of summing a larger result, move a weight to
another dimension instead of summing partials), move a value once for several
ops at one line, or need nothing where the data already lies. Each unborne
prediction says which, from the compiled collectives at its line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..common.byte_sizes import format_bytes
from ..models.propagation import PredictedCollective, PredictionCounts
from ..models.report import Collective, SourceLocation
from .predicted_communication import FAMILIES

# The size from which a collective counts in PredictionCounts (and in the tests that
# hold propagate to the compiled program): smaller ones are latency, not traffic.
COUNTED_BYTES = 2**20

# Predictions of the layout a result leaves the program in (out_shardings): XLA's
# collective there carries no source line.
_OUTPUT_OPS = ("func.return",)

Line = tuple[str, int] | None
Part = tuple[str, Line, int, tuple[str, ...], str]  # family, line, bytes, mesh axes, HLO kind


def _line(src: SourceLocation | None) -> Line:
    return (src.file, src.line) if src else None


def _parts(compiled: list[Collective]) -> list[Part]:
    """Each compiled collective once per execution, a combined one by its parts, each at its own line."""
    out = []
    for c in compiled:
        family = FAMILIES.get(c.kind, c.kind)
        for source, nbytes in [(p.source or c.source, p.bytes) for p in c.parts] or [(c.source, c.bytes)]:
            out.append((family, _line(source), nbytes, tuple(c.mesh_axes), c.kind))
    return out


def match_compiled(
    predicted: list[PredictedCollective], compiled: list[Collective] | None
) -> list[PredictedCollective]:
    """Mark which predictions the compiled program bears out: compiled collectives
    of the same family (all-gather; all-reduce or reduce-scatter; all-to-all,
    collective-permute or reshard) at the same source line that move the
    predicted bytes over some of its mesh axes. A line is not enough: every projection of a model shares
    one helper's line, and a 250 MiB all-reduce predicted for the logits matmul
    was marked compiled on the strength of an 8 MiB one there. Each compiled
    collective bears out predictions up to its own bytes per execution (XLA's
    combiner joins several into one; a TPU may move a bf16 copy of an f32
    value, so half the predicted bytes count), largest predictions first; a
    combined collective, each of its parts at the part's line; a result's
    layout change for out_shardings, by a collective with no line. Each
    prediction left unborne says what XLA compiled instead."""
    if compiled is None:
        return predicted
    parts = _parts(compiled)
    capacity: dict[tuple[str, Line], list[list[Any]]] = {}
    for family, line, nbytes, axes, _ in parts:
        capacity.setdefault((family, line), []).append([nbytes, _base(axes)])
    matched: dict[int, bool] = {}
    for i in sorted(range(len(predicted)), key=lambda k: -predicted[k].bytes):
        p = predicted[i]
        family = FAMILIES.get(p.kind, p.kind)
        at_line = (family, _line(p.source))
        keys = [(family, None), at_line] if p.op in _OUTPUT_OPS else [at_line]
        matched[i] = any(_take(capacity.get(key, []), p.bytes, _base(p.mesh_axes)) for key in keys)
    return [p.model_copy(update={"matched_compiled": True}) if matched[i]
            else p.model_copy(update={"matched_compiled": False, "not_compiled_because": _why_not(p, parts)})
            for i, p in enumerate(predicted)]


def _base(axes: Iterable[str]) -> frozenset[str]:
    """The mesh axes themselves (``fsdp:(2)2``, half of fsdp, is on fsdp)."""
    return frozenset(a.split(":")[0] for a in axes)


def _take(left: list[list[Any]], nbytes: int, axes: frozenset[str]) -> bool:
    """Spend a compiled collective over some of these axes that has half these bytes left."""
    need = -(-nbytes // 2)
    j = next((j for j, (b, on) in sorted(enumerate(left), key=lambda e: e[1][0]) if b >= need and on & axes), None)
    if j is not None:
        left[j][0] = max(0, left[j][0] - nbytes)
    return j is not None


def _what(parts: list[Part], most: int = 3) -> str:
    """The compiled collectives, alike ones counted once: ``2 all-gathers of 16.0 MiB over tp``."""
    alike: dict[tuple[str, int, tuple[str, ...]], int] = {}
    for _, _, nbytes, axes, kind in parts:
        alike[(kind, nbytes, axes)] = alike.get((kind, nbytes, axes), 0) + 1
    ordered = sorted(alike.items(), key=lambda e: (-e[0][1], e[0][0], e[0][2]))
    text = [f"{n} {kind}s" if n > 1 else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}" for (kind, _, _), n
            in ordered]
    out = [f"{t} of {format_bytes(nbytes)} over {','.join(axes) or 'no axis'}"
           for t, ((_, nbytes, axes), _) in zip(text, ordered)][:most]
    return ", ".join(out) + (f" and {len(ordered) - most} more" if len(ordered) > most else "")


def _why_not(p: PredictedCollective, parts: list[Part]) -> str:
    family, axes = FAMILIES.get(p.kind, p.kind), tuple(p.mesh_axes)
    here = [q for q in parts if q[1] is not None and q[1] == _line(p.source)]
    same = [q for q in here if q[0] == family and q[3] == axes]
    if same and sum(q[2] for q in same) >= -(-p.bytes // 2):
        return (f"at this line XLA compiled {_what(same)}, which bear out larger predictions there: it moves this "
                "data with theirs")
    over_axes = [q for q in here if set(q[3]) & set(axes)]
    if over_axes:
        return (f"XLA chose another strategy at this line: {_what(over_axes)}, not this {p.kind} of "
                f"{format_bytes(p.bytes)}")
    if here:
        return (f"XLA moves nothing over {','.join(axes)} at this line (only {_what(here)}): it computes the op "
                "in another layout than the propagated one")
    return (f"XLA compiled no collective at this line: its partitioner computes the op without moving data over "
            f"{','.join(axes)} here (in another layout than the propagated one, or reading what each device holds)")


def prediction_counts(predicted: list[PredictedCollective], compiled: list[Collective] | None,
                      threshold: int = COUNTED_BYTES) -> PredictionCounts | None:
    """Predictions (already matched) and compiled collectives of ``threshold`` bytes or more,
    and how many of each the other accounts for."""
    if compiled is None:
        return None
    big = [p for p in predicted if p.bytes >= threshold]
    borne = sum(1 for p in big if p.matched_compiled)
    known = {(FAMILIES.get(p.kind, p.kind), tuple(p.mesh_axes), _line(p.source)) for p in predicted}
    known_anywhere = {(family, axes) for family, axes, _ in known}
    counted = [q for q in _parts(compiled) if q[2] >= threshold]
    predicted_compiled = sum(1 for family, line, _, axes, _ in counted
                             if ((family, axes, line) in known if line is not None
                                 else (family, axes) in known_anywhere))
    return PredictionCounts(threshold_bytes=threshold, predicted=len(big), borne_out=borne, unborne=len(big) - borne,
                            compiled=len(counted), compiled_predicted=predicted_compiled)
