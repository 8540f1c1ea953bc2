"""Result models of ``rewrite``: the program before and after pinning its
output shardings, what changed, and what running both showed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .report import Collective, Model, RunHeader, SourceLocation, StepTime, TensorInfo


class ProgramFacts(Model):
    """One compiled version of a target."""

    peak_bytes: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    collective_bytes: int = Field(description="Per-device collective bytes per step (bytes x count, summed).")
    collectives: list[Collective]
    outputs: list[TensorInfo]
    time: StepTime | None = Field(default=None, description="Estimated step time of this version.")


class CollectiveChange(Model):
    change: Literal["added", "removed", "changed"]
    kind: str
    mesh_axes: list[str]
    shape: list[int]
    dtype: str
    source: SourceLocation | None
    bytes_before: int = Field(description="Bytes x count per step before (0 when added).")
    bytes_after: int = Field(description="Bytes x count per step after (0 when removed).")


class AppliedSharding(Model):
    path: str
    index: int
    before: list[list[str]] | None
    after: list[list[str]]
    why: str


class Validation(Model):
    ran: bool
    backend: str | None = None
    outputs_match: bool | None = None
    shardings_match: bool | None = None
    time_before_s: float | None = None
    time_after_s: float | None = None
    measured_peak_before_bytes: int | None = Field(
        default=None, description="peak_bytes_in_use from memory_stats(); null where the backend has none (CPU)."
    )
    measured_peak_after_bytes: int | None = None
    repeats: int = 0
    mismatches: list[str] = Field(default_factory=list)
    nan_values: list[str] = Field(
        default_factory=list, description="Outputs that are NaN or Inf in both versions at the same positions, and "
        "how many of their values (they agree; seeded inputs can make a step produce NaN, e.g. the sqrt of a negative "
        "Adam moment).")
    outputs_not_finite: int = Field(
        default=0, description="How many outputs hold NaN or Inf in both versions (nan_values' length): their match "
        "compares those values with nothing; with seeded inputs, shard_lint_inputs gives real ones.")
    reason: str | None = Field(default=None, description="Why it did not run, when it did not.")
    inputs: str | None = Field(default=None, description="seeded (random, from the shapes) or shard_lint_inputs "
                               "(the script's own arrays).")


class RewriteReport(Model):
    name: str
    platform: str
    out_shardings: list[AppliedSharding]
    before: ProgramFacts
    after: ProgramFacts
    collective_changes: list[CollectiveChange]
    python_fix: str | None
    python_fix_missing: str | None = Field(
        default=None, description="Why no python_fix is given where outputs were pinned (the text did not build or "
        "did not check); None where python_fix is given or nothing was pinned.")
    verdict: str = Field(description="What the rewrite achieved, in one or two sentences.")
    remaining: list[str] = Field(
        default_factory=list, description="Costs the rewrite cannot remove, and what would remove them."
    )
    validation: Validation | None = None


class RewriteRun(RunHeader):
    command: str = "rewrite"
    targets: list[RewriteReport]
