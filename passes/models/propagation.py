"""The models of ``propagate``'s report: propagated values with their provenance,
the communication the propagated shardings imply, and agreement with Shardy."""

from __future__ import annotations

from pydantic import Field

from .report import VIA_FIELD, Model, RunHeader, SourceLocation


class ProvenanceStep(Model):
    """One hop of how a value got its sharding: the value it came from and the op between."""

    value: str
    sharding: list[list[str]]
    op: str | None
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD


class PropagatedValue(Model):
    name: str = Field(description="SSA name; values of private functions are prefixed @function:.")
    shape: list[int]
    dtype: str
    sharding: list[list[str]]
    bytes: int
    per_device_bytes: int
    op_name: str | None
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    seed: str | None = Field(description="The stated sharding this value's sharding traces back to.")
    provenance: list[ProvenanceStep] = Field(default_factory=list)


class PredictedCollective(Model):
    kind: str
    bytes: int = Field(description="Per-device bytes the collective delivers.")
    mesh_axes: list[str]
    op: str
    value: str
    reason: str
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    matched_compiled: bool | None = Field(
        description="Whether the compiled program runs a collective of this family at this source line that "
        "moves these bytes (each compiled collective bears out predictions up to its own bytes); null when no "
        "compiled program was available."
    )
    not_compiled_because: str | None = Field(
        default=None, description="Where the compiled program does not bear the prediction out: what XLA "
        "compiled instead, read from the compiled program (another strategy at this line, the line's collectives "
        "spent on larger predictions, or nothing over these axes here); null when borne out or not compiled.")


class PredictionCounts(Model):
    """How far the compiled program bears out the predictions, counting only collectives of
    ``threshold_bytes`` or more per device."""

    threshold_bytes: int
    predicted: int = Field(description="Predictions of the threshold or more.")
    borne_out: int = Field(description="Of those, the ones a compiled collective bears out.")
    unborne: int = Field(description="The others; each says why (not_compiled_because).")
    compiled: int = Field(description="Compiled collectives (a combined one by its parts) of the threshold or more.")
    compiled_predicted: int = Field(description="Of those, the ones with a prediction of their family and mesh axes "
                                    "at their line (one with no line: anywhere).")


class Disagreement(Model):
    value: str
    op_name: str | None
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    ours: list[list[str]]
    shardy: list[list[str]]


class ShardyAgreement(Model):
    reported: int = Field(description="Values this report gives a sharding for (constants and region arguments "
                          "aside).")
    compared: int = Field(description="Reported values paired with the same value in Shardy's output, by op "
                          "identity.")
    agreeing: int
    fraction: float | None = Field(description="agreeing / compared; null when nothing was compared.")
    not_compared: dict[str, int] = Field(default_factory=dict,
                                         description="Reported values not compared, counted by reason.")
    disagreements: list[Disagreement]


class PropagationReport(Model):
    name: str
    mesh: dict[str, int]
    values: list[PropagatedValue] = Field(description="The largest values first; provenance only for values "
                                          "--explain names.")
    values_omitted: int = Field(default=0, description="Values left out of the list (--all-values lists them).")
    predicted: list[PredictedCollective]
    not_compiled: str | None = Field(default=None, description="Why the predictions were not matched against a "
                                     "compiled program (propagation itself does not need one).")
    agreement_with_shardy: ShardyAgreement | None
    prediction_counts: PredictionCounts | None = Field(default=None, description="Predictions against the compiled "
                                                       "program; null when not compiled.")
    ops_without_rule: list[str] = Field(default_factory=list, description="Ops that stop propagation.")
    sweeps: int = 0


class PropagateRun(RunHeader):
    command: str = "propagate"
    targets: list[PropagationReport]
