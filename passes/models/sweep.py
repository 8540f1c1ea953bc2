"""The sweep's report: every candidate compiled, ranked."""

from __future__ import annotations

from typing import Any

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


class SweepRun(RunHeader):
    command: str = "sweep"
    platform: str
    budget_bytes: int | None
    candidates: list[SweepCandidate] = Field(description="Ranked: those that fit by time, then those that do not, "
                                             "then failures.")
