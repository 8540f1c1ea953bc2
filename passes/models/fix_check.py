"""What compiling a finding's fix showed: the model ``Finding.fix_check`` holds."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FixVerdict(str, Enum):
    """What compiling the program with a finding's fix applied showed."""

    better = "better"  # one of the peak and the traffic falls, the other grows by no more than the tolerance
    worse = "worse"  # the peak or the traffic grows and neither falls
    trade_off = "trade-off"  # one falls, the other grows
    no_change = "no-change"
    failed = "failed"  # the program with the fix did not compile
    # Its figures are better, but XLA compiles it with an involuntary full rematerialization (SL104) the
    # program as written does not have: the whole value on every device, which the figures may not show
    # (a peak on a mesh this size, a step's traffic the partitioner's rebuild adds at scale).
    rematerializes = "rematerializes"
    # Better on the peak alone, for a finding about the traffic a step moves (its rule's about_traffic): the
    # change leaves the finding's collectives as they are, so it is not printed as that finding's fix.
    peak_only = "peak-only"


class FixCheck(_Model):
    """A fix applied to the compiled program (its StableHLO's shardings edited, compiled again
    the same way) and compared with the program as written."""

    change: str = Field(description="What was applied: 'params[...] -> P(None, 'model')', or the out_shardings.")
    verdict: FixVerdict
    peak_bytes_before: int
    peak_bytes_after: int | None = None
    traffic_bytes_before: int = Field(
        description="Per-device bytes per step: the program's collectives plus the state the next step reshards "
                    "on entry (SL201's outputs that come back on another layout).")
    traffic_bytes_after: int | None = None
    collective_bytes_before: int | None = Field(
        default=None, description="Per-device bytes of the program's collectives per step (bytes x count): the "
                                  "traffic without the state resharded on entry, rewrite's 'collectives / step'.")
    collective_bytes_after: int | None = None
    error: str | None = Field(default=None, description="Why the fixed program did not compile.")
    rematerialized: list[str] = Field(
        default_factory=list, description="What XLA replicates in full with the fix and not as written (SL104's "
                                          "findings on the fixed program, their messages).")

    @property
    def peak_delta(self) -> int:
        return (self.peak_bytes_after or 0) - self.peak_bytes_before

    @property
    def traffic_delta(self) -> int:
        return (self.traffic_bytes_after or 0) - self.traffic_bytes_before

    @property
    def collective_delta(self) -> int | None:
        """The change in collective bytes per step, where both were measured."""
        if self.collective_bytes_before is None or self.collective_bytes_after is None:
            return None
        return self.collective_bytes_after - self.collective_bytes_before


class StatedLayoutEdit(Enum):
    """Which edit of a layout the program states compiles a finding's fix (a rule's ``RuleTraits.layout_edit``,
    read by the analyzer's layout fix checks: each kind is one builder of candidate edits there)."""

    # The constraint the finding names, its axes moved to a dimension they divide or only those that divide it
    # kept.
    even_constraint = "even-constraint"
    # The candidates the rule derived (the argument moved, a constraint inserted, the user's restated).
    rule_candidates = "rule-candidates"
    # The value's layouts on the way to its last one, a constraint for each, staged before what asks for it.
    staged = "staged"
    # The output pinned to (or returned in the dtype of) the donated input it should reuse, or the donation
    # dropped.
    donation = "donation"
