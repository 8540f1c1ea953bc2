"""Estimated times as text, the same in every report."""

from __future__ import annotations

from ...passes.common.durations import format_seconds
from ...passes.models.report import StepTime

__all__ = ["format_seconds", "step_time_basis", "step_time_line"]


def step_time_line(t: StepTime) -> str:
    """``12.3 ms (compute 9.1 ms, communication 4.0 ms of which 2.8 ms can overlap; 13.1 ms serial)``"""
    parts = [f"compute {format_seconds(t.compute_seconds)}"]
    if t.communication_seconds:
        comm = f"communication {format_seconds(t.communication_seconds)}"
        if t.async_communication_seconds:
            comm += f", {format_seconds(t.async_communication_seconds)} of it async"
        if t.across_hosts_seconds:
            comm += f", {format_seconds(t.across_hosts_seconds)} across hosts"
        parts.append(comm)
    if t.offloaded_seconds:
        parts.append(f"offloaded (SparseCore) {format_seconds(t.offloaded_seconds)}")
    text = f"{format_seconds(t.seconds)} ({'; '.join(parts)})"
    if t.serial_seconds != t.seconds:
        text += f", {format_seconds(t.serial_seconds)} with no overlap"
    return text


def step_time_basis(t: StepTime) -> str:
    bound = "memory-bound" if t.memory_seconds >= t.flop_seconds else "compute-bound"
    text = f"{t.device}: {bound} roofline per op, ring collectives"
    if t.nominal:
        text += "; nominal CPU figures, for comparing targets only"
    return text
