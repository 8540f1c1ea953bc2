"""Per-device memory of common accelerators, for ``--device``.

Figures are the published memory capacity of one device. The runtime keeps some
of it for itself, which is what the low-headroom rule (SL302) leaves room for.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1024**3


@dataclass(frozen=True)
class DevicePreset:
    name: str
    memory_bytes: int
    description: str


PRESETS: dict[str, DevicePreset] = {p.name: p for p in (
    # The GPUs that are also compile targets take their memory from the target's
    # spec file below (one figure per device, whichever flag names it).
    DevicePreset("h100", 80 * GiB, "NVIDIA H100 80GB (SXM or PCIe)"),
    DevicePreset("h100-nvl", 94 * GiB, "NVIDIA H100 NVL 94GB"),
    DevicePreset("h200", 141 * GiB, "NVIDIA H200 141GB"),
    DevicePreset("b200", 180 * GiB, "NVIDIA B200 (180GB as shipped in DGX B200)"),
    DevicePreset("a100-80g", 80 * GiB, "NVIDIA A100 80GB"),
    DevicePreset("a100-40g", 40 * GiB, "NVIDIA A100 40GB"),
    DevicePreset("tpu-v4", 32 * GiB, "Google TPU v4 (32 GiB HBM per chip)"),
    DevicePreset("tpu-v5e", 16 * GiB, "Google TPU v5e (16 GiB HBM per chip)"),
    DevicePreset("tpu-v5p", 95 * GiB, "Google TPU v5p (95 GiB HBM per chip)"),
    DevicePreset("tpu-v6e", 32 * GiB, "Google TPU v6e Trillium (32 GiB HBM per chip)"),
)}
ALIASES = {"a100": "a100-80g", "v4": "tpu-v4", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e"}


def find_preset(name: str) -> DevicePreset | None:
    key = name.strip().lower()
    return PRESETS.get(ALIASES.get(key, key))


def _gpu_target_memory(name: str) -> int | None:
    from .gpu_targets import load_target

    return load_target(name).memory_bytes


for _name in ("h100", "h200", "b200", "a100-80g", "a100-40g"):
    PRESETS[_name] = DevicePreset(_name, _gpu_target_memory(_name), PRESETS[_name].description)
