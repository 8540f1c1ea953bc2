"""The one sentence every report gives for agreement with Shardy: the fraction of
the values compared, and how many of the reported values that covers and why
the others were not compared (a comparison that covered nothing has no fraction);
and the one sentence for how far the compiled program bears out the predictions."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.propagation import PredictionCounts, ShardyAgreement


def agreement_text(a: ShardyAgreement) -> str:
    if a.compared and a.fraction is not None:
        head = f"agreement with Shardy: {a.agreeing}/{a.compared} compared values ({100 * a.fraction:.1f}%)"
    else:
        head = "agreement with Shardy: no value compared"
    cover = f"{a.compared} of {a.reported} reported values compared"
    if a.not_compared:
        cover += " (" + ", ".join(f"{n} not: {why}" for why, n in a.not_compared.items()) + ")"
    return f"{head}; {cover}"


def prediction_counts_text(c: PredictionCounts) -> str:
    size = format_bytes(c.threshold_bytes)
    why = " (each says what XLA compiled instead)" if c.unborne else ""
    return (f"predictions of {size} or more: {c.predicted}, {c.borne_out} borne out by the compiled program, "
            f"{c.unborne} not{why}; compiled collectives of {size} or more: {c.compiled}, {c.compiled_predicted} of "
            "them predicted")
