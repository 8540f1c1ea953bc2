"""What every format of ``sweep`` writes the same way: the headline and each
candidate's fit, slowdown and slowest collective."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.models.sweep import CandidateRun, SweepCandidate, SweepRun


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


def collectives_text(c: SweepCandidate, n: int) -> str:
    """A candidate's bytes of collectives (``n``); a failed one has none measured, not 0 B."""
    return "-" if c.error is not None else format_bytes(n)


def _none_ranked(run: SweepRun) -> str:
    """The headline when no candidate ranks: each failed (the table gives each one's reason), or none fits."""
    failed = [c for c in run.candidates if c.error is not None]
    if not run.candidates:
        return "No candidates."
    if len(failed) == len(run.candidates):
        return (f"Every candidate failed ({len(failed)} of {len(failed)}): nothing to rank (each one's reason is "
                "given with it).")
    over = len(run.candidates) - len(failed)
    text = f"No candidate fits the budget ({over} over it"
    return text + (f", {len(failed)} failed)." if failed else ").")


def lower_bounds_text(run: SweepRun) -> str:
    """A caveat where the ranking rests on counts that are lower bounds and differ between the candidates: a loop
    whose trip count XLA does not know counts its collectives once (a diffrax step's layouts ranked by its solver's
    all-reduces counted once each, newbie16 F2)."""
    ranked = [c for c in run.candidates if c.rank is not None]
    if len({c.unknown_loop_collectives for c in ranked}) < 2:
        return ""
    counts = ", ".join(f"{c.label} {c.unknown_loop_collectives}" for c in ranked)
    return ("; the ranking rests on lower bounds that differ between them: collectives in loops whose trip count XLA "
            f"does not know are counted once ({counts}); --loop-trips N ranks them with each such loop run N times")


def headline(run: SweepRun) -> str:
    best = next((c for c in run.candidates if c.rank == 1), None)
    if best is None:
        return _none_ranked(run)
    # Without a budget nothing was measured against one: "fits" would claim what was not checked.
    text = f"Fastest {'that fits' if run.budget_bytes else '(no budget given)'}: {best.label} "
    text += f"(~{format_seconds(best.seconds)})"
    second = next((c for c in run.candidates if c.rank == 2), None)
    if second is not None and second.slowdown:
        tied = second.slowdown <= 1.01
        text += (f"; next: {second.label}, as fast, {format_bytes(second.collective_bytes)} of collectives per step "
                 f"against {format_bytes(best.collective_bytes)}" if tied
                 else f"; next: {second.label}, {second.slowdown:.2f}x slower")
    text += lower_bounds_text(run)
    if best.time is not None and best.time.nominal:
        # First: a newcomer reads the seconds before any caveat after them.
        text = ("Nominal CPU figures (a CPU compile's roofline, not a GPU's or TPU's): the seconds predict nothing and "
                "rank little; equal times are ordered by collective bytes; --platform h100 or tpu-v5p ranks on that "
                "target's figures. " + text)
    return text + "."


def run_of(run: SweepRun, c: SweepCandidate) -> CandidateRun | None:
    """Where and how long the candidate's compile ran (every target of one parameter set shares it)."""
    if run.execution is None:
        return None
    return next((r for r in run.execution.runs if r.params == c.params), None)


def compile_time_text(run: SweepRun, c: SweepCandidate) -> str:
    r = run_of(run, c)
    return format_seconds(r.seconds) if r is not None else "-"


def compiled_on_text(run: SweepRun, c: SweepCandidate) -> str:
    r = run_of(run, c)
    return f"{format_seconds(r.seconds)} on {r.worker}" if r is not None else "-"


def execution_text(run: SweepRun) -> str:
    """``Compiled on Ray, 2 workers: 4 candidates in 14.1 s (28.3 s of compiles, 2.00x); ...``"""
    x = run.execution
    if x is None:
        return ""
    where = {"in-process": "in this process", "local": f"in {x.workers} local processes",
             "ray": f"on Ray, {x.workers} worker CPUs"}[x.executor]
    text = (f"Compiled {where}: {len(x.runs)} candidate(s) in {format_seconds(x.wall_seconds)} "
            f"({format_seconds(x.candidate_seconds)} of compiles, {x.speedup:.2f}x)")
    if x.startup_seconds:
        text += f"; Ray runtime started or reached in {format_seconds(x.startup_seconds)}"
    if x.executor != "in-process":
        text += f"; {format_seconds(x.mean_overhead_seconds)} scheduling overhead per candidate"
    return text + "."
