"""A device's peak figures, the model the step-time estimate and suggest's solver price with (the analyzer
reads them from ``analyzer/data/device_performance`` and carries them on the resolved target)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    """Peak figures of one device, from ``analyzer/data/device_performance``."""

    name: str
    description: str
    matmul_flops_per_s: tuple[tuple[str, float], ...]
    hbm_bytes_per_s: float
    link_within_host: float
    link_across_hosts: float
    latency_within_host: float
    latency_across_hosts: float
    sources: tuple[str, ...] = ()
    nominal: bool = False

    def peak(self, dtype: str) -> float:
        table = dict(self.matmul_flops_per_s)
        return table.get(dtype) or table.get("f32") or max(table.values())
