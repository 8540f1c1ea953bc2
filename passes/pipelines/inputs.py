"""What the target pipelines (lint, check) take: the facts a compile gave
(``CompiledFacts``, built once in ``analyzer/backend/target_analysis.py``) and the run's
settings as the passes see them (``PassConfig``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..models.device_spec import DeviceSpec
from ..models.memory_stats import MemoryStats
from ..models.report import Severity, where_text
from ..rules.table import all_options
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership, library_relative

# Re-exported on purpose (the analyzer may not import source/): the type of PassConfig's ``ownership`` field
# and its default, handed on with PassConfig (the analyzer builds it), and whose code a path is (the
# analyzer shows a library's file by its package path, as the passes tell frames). The other fields'
# types are models (models/device_spec.py, models/memory_stats.py), imported from there.
__all__ = ["DEFAULT_OWNERSHIP", "CodeOwnership", "CompiledFacts", "PassConfig", "library_relative"]

@dataclass(frozen=True)
class CompiledFacts:
    """What compiling a target gave: HLO text and XLA's memory figures and reports."""

    hlo_text: str
    platform: str
    memory: MemoryStats | None = None
    live_range_text: str | None = None
    buffer_assignment_text: str | None = None
    # Compiled shardings per flattened result/argument, as mesh axes per dim;
    # None where unknown (then the module's own shardings stand).
    output_shardings: tuple[list[list[str]] | None, ...] | None = None
    input_shardings: tuple[list[list[str]] | None, ...] | None = None
    # The host (process index) of each logical device, when the devices span several.
    device_processes: tuple[int, ...] | None = None
    # XLA's cost_analysis() of the compiled program, where the backend gives one.
    xla_cost: dict[str, Any] | None = None
    # What XLA's SPMD partitioner printed while compiling ("Involuntary full rematerialization" lines).
    compiler_warnings: str = ""
    # The flattened arguments the user donated, as jit was asked (it drops a donation no output matches
    # before the module is written); None where only the module is known.
    donated_inputs: frozenset[int] | None = None


@dataclass(frozen=True)
class PassConfig:
    options: dict[str, Any] = field(default_factory=dict)
    severities: dict[str, Severity] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()
    budget_bytes: int | None = None
    ownership: CodeOwnership = DEFAULT_OWNERSHIP
    device_spec: DeviceSpec | None = None  # the step-time estimate's device; None: no estimate
    # --loop-trips: how many times a loop whose trip count XLA does not know is taken to run; None: once.
    loop_trips: int | None = None
    # How a (source, via) pair reads inside a message (paths relative to where the user is).
    where: Callable[[Any, Any], str] = where_text

    def resolved_options(self) -> dict[str, Any]:
        out = {name: opt.default for name, opt in all_options().items()}
        out.update(self.options)
        return out
