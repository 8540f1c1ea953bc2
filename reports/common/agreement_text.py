"""The one sentence every report gives for agreement with Shardy: the fraction of
the values compared, and how many of the reported values that covers and why
the others were not compared (a comparison that covered nothing has no fraction)."""

from __future__ import annotations

from ...passes.models.propagation import ShardyAgreement


def agreement_text(a: ShardyAgreement) -> str:
    if a.compared and a.fraction is not None:
        head = f"agreement with Shardy: {a.agreeing}/{a.compared} compared values ({100 * a.fraction:.1f}%)"
    else:
        head = "agreement with Shardy: no value compared"
    cover = f"{a.compared} of {a.reported} reported values compared"
    if a.not_compared:
        cover += " (" + ", ".join(f"{n} not: {why}" for why, n in a.not_compared.items()) + ")"
    return f"{head}; {cover}"
