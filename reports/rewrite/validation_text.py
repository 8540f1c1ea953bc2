"""The validation's verdict in words, one for every format: a match over outputs that hold NaN or Inf in
both versions compared nothing at those values, so the verdict says how many do."""

from __future__ import annotations

from ...passes.models.rewrite import Validation


def outputs_match_text(v: Validation) -> str:
    """``yes``, ``NO``, or ``yes, but 72 outputs are NaN or Inf in both versions (seeded inputs: ...)``."""
    if not v.outputs_match:
        return "NO"
    if not v.outputs_not_finite:
        return "yes"
    n = v.outputs_not_finite
    why = ("seeded inputs: give shard_lint_inputs for real ones" if v.inputs != "shard_lint_inputs"
           else "with the script's own inputs")
    return f"yes, but {n} output{'s are' if n > 1 else ' is'} NaN or Inf in both versions ({why})"
