"""Every rule code, once (as ruff's codes.rs): its code, name and scope. Everywhere else a rule is
named by these constants, compared by identity of code, never by a string literal."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Scope(Enum):
    """What a rule reads: a compiled target's facts, a script's source, or the run's suppressions."""

    TARGET = "target"
    SOURCE = "source"
    META = "meta"  # after suppressions are applied


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    scope: Scope

    def __str__(self) -> str:
        return self.code


SL001 = Code("SL001", "unused-suppression", Scope.META)
SL101 = Code("SL101", "replicating-collective", Scope.TARGET)
SL102 = Code("SL102", "collective-in-loop", Scope.TARGET)
SL103 = Code("SL103", "expanding-partial-sum", Scope.TARGET)
SL104 = Code("SL104", "involuntary-full-rematerialization", Scope.TARGET)
SL105 = Code("SL105", "unexplained-reshard", Scope.TARGET)
SL201 = Code("SL201", "output-sharding-mismatch", Scope.TARGET)
SL202 = Code("SL202", "missing-donation", Scope.TARGET)
SL203 = Code("SL203", "replicated-argument", Scope.TARGET)
SL204 = Code("SL204", "uneven-sharding", Scope.TARGET)
SL205 = Code("SL205", "unusable-donation", Scope.TARGET)
SL206 = Code("SL206", "propagated-uneven-sharding", Scope.TARGET)
SL207 = Code("SL207", "idle-mesh-axis", Scope.TARGET)
SL208 = Code("SL208", "gathered-argument", Scope.TARGET)
SL301 = Code("SL301", "peak-over-budget", Scope.TARGET)
SL302 = Code("SL302", "low-headroom", Scope.TARGET)
SL401 = Code("SL401", "replicated-device-put-multihost", Scope.SOURCE)
SL402 = Code("SL402", "reduction-outside-jit", Scope.SOURCE)
SL403 = Code("SL403", "feedback-loop-without-out-shardings", Scope.SOURCE)
SL404 = Code("SL404", "host-transfer-in-loop", Scope.SOURCE)

ALL_CODES = (SL001, SL101, SL102, SL103, SL104, SL105, SL201, SL202, SL203, SL204, SL205, SL206, SL207, SL208,
             SL301, SL302, SL401, SL402, SL403, SL404)
