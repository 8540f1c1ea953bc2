"""The gate's baseline and its verdict: what is compared and how it came out."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from ..common.byte_sizes import format_bytes
from ..common.durations import format_seconds
from .report import SCHEMA_VERSION, Model

BASELINE_VERSION: Final = 1

# A baseline is a file a user (or an attacker) can edit: byte counts are
# non-negative and below 2^60 (an exabyte), times finite, counts positive.
ByteCount = Annotated[int, Field(ge=0, le=1 << 60)]
Count = Annotated[int, Field(ge=0, le=1 << 60)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

TIME_METRIC = "estimated step time"


class CollectiveSummary(Model):
    kind: str
    mesh_axes: list[str]
    shape: list[int]
    dtype: str
    bytes_per_step: ByteCount
    count: Count
    source: str | None


class BaselineTarget(Model):
    platform: str
    num_devices: Count
    mesh: dict[str, Count]
    peak_bytes: ByteCount | None
    temp_bytes: ByteCount | None
    argument_bytes: ByteCount | None
    output_bytes: ByteCount | None
    alias_bytes: ByteCount | None
    collective_bytes: ByteCount
    bytes_by_kind: dict[str, ByteCount] = Field(description="Per-step bytes by 'kind over axes'.")
    collectives: list[CollectiveSummary]
    errors: list[str] = Field(description="Error-level findings: 'CODE file:line: message'.")
    step_seconds: Seconds | None = Field(default=None, description="Estimated step time (the overlapped bound).")
    step_time_device: str | None = Field(default=None, description="The device model of the estimate.")


class Baseline(Model):
    baseline_version: Literal[1] = BASELINE_VERSION
    tool_version: str
    jax_version: str
    jaxlib_version: str
    compilers: dict[str, str] = Field(
        default_factory=dict,
        description="The releases the figures were compiled with (jax, jaxlib, and libtpu or the CUDA plugin where "
                    "installed): XLA versions compile the same program differently. Empty in older baselines.")
    targets: dict[str, BaselineTarget]


class GateThresholds(Model):
    peak_increase: float = 0.02
    collective_increase: float = 0.05
    new_collective_bytes: int = 1024**2
    time_increase: float = 0.05


class GateRow(Model):
    target: str
    metric: str
    before: int | float | None = Field(description="Bytes, or seconds for the estimated step time.")
    after: int | float | None
    ratio: float | None
    alert: str | None = None

    def display(self, value: int | float | None) -> str:
        if value is None:
            return "-"
        if self.metric.startswith("new error"):
            return str(value)
        if self.metric.startswith(TIME_METRIC):
            return format_seconds(float(value))
        return format_bytes(int(value))


class GateResult(Model):
    schema_version: Literal["1.1"] = SCHEMA_VERSION
    command: str = "gate"
    baseline: str
    passed: bool
    thresholds: GateThresholds
    rows: list[GateRow]
    compiler_change: str | None = Field(
        default=None, description="Set when the baseline was compiled by other releases than this run: the "
                                  "figures' changes may be the compiler's rather than the code's.")
    rebaselined: bool = Field(
        default=False, description="The compilers changed and the gate was told to re-baseline: the baseline now "
                                   "holds this run's figures and the gate passed.")
