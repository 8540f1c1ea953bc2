"""Which output of a step is which input coming back (a step's state).

Outputs correspond to inputs by pytree path: ``result[0]['w']`` is argument 0's
``['w']`` when the result is a tuple, and ``result['w']`` is argument 0's ``['w']``
when it is not. Where the structures differ (a value-function step ``V_next -> V``),
outputs left over correspond by position to inputs left over with equal shape and
dtype. A pair always has equal shape and dtype. A state argument that is not the
result's same position pairs by its keys below the argument (``result[1]['w']`` with
``state['w']``), tagged ``SUFFIX``: the gradients a ``(loss, grads)`` step returns
pair so too, and SL201 words such a finding as conditional on the value being fed back.
"""

from __future__ import annotations

from ..common.sharding_text import normalized, out_shardings_text
from ..models.entry import EntrySignature, RoundTrip
from ..models.report import TensorInfo

# How a pair matched only by its key path below the argument (result[1]['w'] <- params['w']) is tagged: the
# paths alone do not tell a state coming back updated from a value of the state's tree (the gradients of a
# value_and_grad step), which the caller never feeds back; SL201 says which it assumed.
SUFFIX = "path suffix"


def _same_type(a: TensorInfo, b: TensorInfo) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def correspond(sig: EntrySignature) -> tuple[RoundTrip, ...]:
    used_in: set[int] = set()
    pairs: dict[int, RoundTrip] = {}
    by_keys: dict[tuple[str | int, ...], int] = {k: i for i, k in enumerate(sig.input_keys)}

    def take(o: int, i: int, how: str) -> None:
        used_in.add(i)
        pairs[o] = RoundTrip(sig.outputs[o], sig.inputs[i], sig.input_keys[i][0], how)

    tuple_result = any(k and isinstance(k[0], int) for k in sig.output_keys) and len(
        {k[0] for k in sig.output_keys if k}
    ) > 1
    for o, keys in enumerate(sig.output_keys):
        candidates = [keys] if tuple_result else [(0, *keys), keys]
        for cand in candidates:
            i = by_keys.get(tuple(cand))
            if i is not None and i not in used_in and _same_type(sig.outputs[o], sig.inputs[i]):
                take(o, i, "path")
                break
    # A state argument that is not first keeps its key suffix: result[0]['w'] <- state['w'].
    for o, keys in enumerate(sig.output_keys):
        if o in pairs or len(keys) < 2:
            continue
        matches = [
            i for i, k in enumerate(sig.input_keys)
            if i not in used_in and tuple(k[1:]) == tuple(keys[1:]) and _same_type(sig.outputs[o], sig.inputs[i])
        ]
        if len(matches) == 1:
            take(o, matches[0], SUFFIX)
    for o in range(len(sig.outputs)):
        if o in pairs or o >= len(sig.inputs) or o in used_in:
            continue
        if _same_type(sig.outputs[o], sig.inputs[o]):
            take(o, o, "position")
    return tuple(pairs[o] for o in sorted(pairs))


def mismatched(roundtrips: tuple[RoundTrip, ...]) -> tuple[RoundTrip, ...]:
    """Round trips whose output comes back on another sharding than the input had."""
    out = []
    for rt in roundtrips:
        o = normalized(rt.output.sharding, len(rt.output.shape))
        i = normalized(rt.input.sharding, len(rt.input.shape))
        if o is not None and i is not None and o != i:
            out.append(rt)
    return tuple(out)


def suggested_out_shardings(outputs: tuple[TensorInfo, ...], roundtrips: tuple[RoundTrip, ...]) -> str | None:
    """The ``out_shardings=`` text that pins every state output to its input's
    layout and keeps the others as compiled; None when nothing needs pinning."""
    fixes = {rt.output.index: rt.input.sharding for rt in mismatched(roundtrips)}
    if not fixes:
        return None
    return out_shardings_text([o.path for o in outputs], [fixes.get(o.index, o.sharding) for o in outputs])
