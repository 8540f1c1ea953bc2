"""What every format of ``sweep`` writes the same way: the headline and each
candidate's fit, slowdown and slowest collective."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.sweep import SweepCandidate, SweepRun


def fit_text(c: SweepCandidate) -> str:
    if c.error is not None:
        return "failed"
    return {True: "yes", False: "NO", None: "-"}[c.fits]


def slowdown_text(c: SweepCandidate) -> str:
    return f"{c.slowdown:.2f}x" if c.slowdown is not None else "-"


def slowest_collective_text(c: SweepCandidate) -> str:
    if c.error is not None:
        return c.error
    if not c.top_collectives:
        return "no collectives"
    x = c.top_collectives[0]
    return (f"{x.kind} {format_bytes(x.bytes)} x{x.count} over {','.join(x.mesh_axes) or '-'}"
            + (f" at {x.source}" if x.source else ""))


def headline(run: SweepRun) -> str:
    best = next((c for c in run.candidates if c.rank == 1), None)
    if best is None:
        return "No candidate fits the budget." if run.candidates else "No candidates."
    text = f"Fastest that fits: {best.label} (~{format_seconds(best.seconds)})"
    second = next((c for c in run.candidates if c.rank == 2), None)
    if second is not None and second.slowdown:
        text += f"; next: {second.label}, {second.slowdown:.2f}x slower"
    if best.time is not None and best.time.nominal:
        text += ". Nominal CPU figures: the ranking compares, the seconds do not predict"
    return text + "."
