"""SL105's fix where the gather is of an activation (no argument): the texts of its compiled candidates.

The rule derives the candidates (passes/propagation/split_activations.py finds the matmul whose weight puts
the gathered axis on the value): a ``with_sharding_constraint`` on that matmul's output with the gathered axes
moved or dropped, and the weight's axis moved or dropped. layout_fix_checks.py compiles them as it compiles
SL206's; this module says what each one is, the fix when one measures better (with what the others measured,
so the user sees which layouts cost more), and what was tried when none does: the gathers are then the price
of the layout as written.
"""

from __future__ import annotations

import re

from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixCheck, FixVerdict, StatedLayoutEdit
from ...passes.models.report import Finding, FixCandidate
from ...passes.pipelines.catalogue import PARAMETER_FIXES, layout_edit
from .fix_verdicts import judged_text

_PROPAGATED = re.compile(r"^propagated_value\[\d+\]\[\d+\]( propagated_value\[\d+\]\[\d+\])*$")
_VALUE_REF = re.compile(r"propagated_value\[(\d+)\]\[(\d+)\]")


def splits_activation(f: Finding) -> bool:
    """A parameter's rule whose finding names no new sharding for its argument but carries candidates (its
    ``layout_edit`` trait: SL105 about an activation's gather): they are compiled with the stated-layout fixes."""
    return (f.rule in PARAMETER_FIXES and layout_edit(f) is StatedLayoutEdit.rule_candidates
            and f.suggested_sharding is None and bool(f.candidates))


def inserted_constraint(f: Finding, c: FixCandidate
                        ) -> tuple[str, str, dict[tuple[int, int], list[list[str]]]] | None:
    """A candidate that inserts a ``with_sharding_constraint`` on values (``propagated_value[op][result]``,
    several where one line's op runs in several places: a layer's forward and its rematerialized copy): the
    change as the check names it, the fix, and where each constraint goes; None for any other candidate."""
    if _PROPAGATED.match(c.value) is None:
        return None
    inserted = {(int(op), int(result)): c.sharding for op, result in _VALUE_REF.findall(c.value)}
    spec = pspec_text(c.sharding)
    if not splits_activation(f):
        return f"{c.value} -> {spec}", f"constrain it with jax.lax.with_sharding_constraint to {spec}", inserted
    # The output of the matmul by the weight the finding names, where the split begins (the rule's split_origin).
    at = f" at line {f.split_origin.line}" if f.split_origin is not None else ""
    return (f"the output of the matmul by {f.parameter}{at} -> {spec}",
            f"constrain the output of the matmul by {f.parameter}{at} with jax.lax.with_sharding_constraint to "
            f"{spec}", inserted)


def also_tried(f: Finding, chosen: str, checks: list[tuple[str, FixCheck]]) -> str:
    """After SL105's fix, the candidates measured no better (a weight moved off the axis gathers the logits
    instead): the layouts the user need not try. Another candidate measured better is left out: the best is the
    fix. An inserted constraint is the user's as written, on the value and its cotangent (sharding_edits.py)."""
    others = [f"{change}: {judged_text(c)}" for change, c in checks
              if change != chosen and c.verdict is not FixVerdict.better] if splits_activation(f) else []
    return f"; also tried: {'; '.join(others)}" if others else ""


def none_helped(f: Finding, tried: str) -> str:
    """The fix where no candidate measured better: what each measured (for SL105's activation gather, that the
    gathers are the price of the layout as written)."""
    if splits_activation(f):
        return f"no layout change measured better, so these gathers are the price of this layout: {tried}"
    if moves_callback_reader(f):  # the callback stays what to change: its advice kept after what was measured
        return f"{tried}; {(f.fix or '').removeprefix('no fix compiled: ')}"
    return f"no layout change found that helps: {tried}"


def moves_callback_reader(f: Finding) -> bool:
    """SL104 about a host callback's value, whose one candidate (not staged layouts: its ``layout_edit`` is
    staged) is the argument whose split reaches the callback's reader, without that split."""
    return layout_edit(f) is StatedLayoutEdit.staged and len(f.candidates) == 1 and f.parameter is not None
