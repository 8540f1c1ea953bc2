"""The sweep's report: every candidate compiled, ranked."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .report import Collective, Model, RunHeader, StepTime


class SweepCandidate(Model):
    label: str = Field(description="The candidate's parameters and target, as shown: mesh_shape=(4, 2) / train_step.")
    params: dict[str, Any] = Field(description="The shard_lint_targets parameters this candidate set.")
    target: str | None = Field(description="The target's name; null when the candidate failed before compiling.")
    rank: int | None = Field(default=None, description="1 is fastest among those that fit; null: did not fit "
                             "or failed.")
    fits: bool | None = Field(default=None, description="Peak within the budget; null without a budget.")
    peak_bytes: int | None = None
    budget_bytes: int | None = None
    collective_bytes: int = 0
    unknown_loop_collectives: int = Field(default=0, description="Collectives counted once in loops whose trip "
                                          "count XLA does not know: its collective bytes and time are lower bounds.")
    within_host_bytes: int = 0
    cross_host_bytes: int = 0
    seconds: float | None = Field(default=None, description="Estimated step time (overlapped bound).")
    slowdown: float | None = Field(default=None, description="seconds / the best candidate's seconds.")
    pareto: bool = Field(default=False, description="No other candidate has both a lower peak and a lower time.")
    time: StepTime | None = None
    top_collectives: list[Collective] = Field(default_factory=list, description="The three slowest collectives.")
    warnings: int = 0
    errors: int = 0
    error: str | None = Field(default=None, description="Why the candidate has no figures.")



class CandidateRun(Model):
    label: str = Field(description="The candidate's parameters as shown, or 'the targets' for none.")
    params: dict[str, Any] = Field(description="As in candidates[].params: every candidate with these came from "
                                   "this run.")
    worker: str = Field(description="Where it compiled: this process, a local slot, or a Ray node and process.")
    seconds: float = Field(description="How long its lint ran there.")
    overhead_seconds: float = Field(description="Scheduling and transfer: the time from handing it out to "
                                    "having its result, less `seconds`.")


class SweepExecution(Model):
    """How the sweep ran: the one part of its report that changes from run to run."""

    executor: Literal["in-process", "local", "ray"]
    workers: int = Field(description="Candidates compiled at once (Ray: the cluster's CPUs, or --jobs).")
    startup_seconds: float = Field(default=0.0, description="Starting or reaching the executor (a Ray runtime) "
                                   "before the first candidate was handed out.")
    wall_seconds: float = Field(description="From the first candidate handed out to the last result.")
    candidate_seconds: float = Field(description="The candidates' own times, added up.")
    speedup: float = Field(description="candidate_seconds / wall_seconds.")
    mean_overhead_seconds: float = Field(description="Scheduling and transfer per candidate.")
    runs: list[CandidateRun] = Field(description="Per candidate, in the order they were handed out.")


class SweepRun(RunHeader):
    command: str = "sweep"
    platform: str
    budget_bytes: int | None
    candidates: list[SweepCandidate] = Field(description="Ranked: those that fit by time, then those that do not, "
                                             "then failures.")
    execution: SweepExecution | None = Field(default=None, description="Where and how long each candidate ran, "
                                             "and the speedup: the only part that differs between two runs.")


def params_label(params: dict[str, Any]) -> str:
    """A candidate's parameter values as the sweep names it (``batch=8, remat=True``)."""
    return ", ".join(f"{k}={v!r}" for k, v in params.items())
