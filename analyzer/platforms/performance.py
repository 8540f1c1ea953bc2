"""The device figures behind the step-time estimate, read from
``data/device_performance/devices.json`` (published peaks, with their sources)."""

from __future__ import annotations

import functools
import json
from importlib import resources

from ...passes.models.device_spec import DeviceSpec


@functools.cache
def _table() -> dict:
    text = resources.files("jax_shard_lint.analyzer").joinpath(
        "data", "device_performance", "devices.json").read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def known_devices() -> tuple[str, ...]:
    return tuple(_table())


def device_spec(name: str) -> DeviceSpec | None:
    entry = _table().get(name)
    if entry is None:
        return None
    return DeviceSpec(
        name=name, description=entry["description"],
        matmul_flops_per_s=tuple(sorted((k, float(v)) for k, v in entry["matmul_flops_per_s"].items())),
        hbm_bytes_per_s=float(entry["hbm_bytes_per_s"]),
        link_within_host=float(entry["link_bytes_per_s"]["within_host"]),
        link_across_hosts=float(entry["link_bytes_per_s"]["across_hosts"]),
        latency_within_host=float(entry["latency_s"]["within_host"]),
        latency_across_hosts=float(entry["latency_s"]["across_hosts"]),
        sources=tuple(entry.get("sources", ())), nominal=bool(entry.get("nominal", False)),
    )


def cpu_device_spec() -> DeviceSpec:
    """The CPU's device model (the table always has it): suggest's solver's where a target has none."""
    spec = device_spec("cpu")
    if spec is None:
        raise RuntimeError("the device table has no cpu entry")
    return spec


# What a real GPU's device_kind says, for --platform gpu.
_KIND_TO_SPEC = (("H200", "h200"), ("H100", "h100"), ("B200", "b200"), ("A100-SXM4-40GB", "a100-40g"),
                 ("A100 40GB", "a100-40g"), ("A100", "a100-80g"))


def spec_for_platform(platform: str, device_kind: str | None = None) -> DeviceSpec | None:
    """The device model of a --platform; for the GPUs JAX sees, by their kind (None
    when no model matches, and the report then carries no estimate)."""
    if platform == "gpu":
        for needle, name in _KIND_TO_SPEC:
            if device_kind and needle.lower() in device_kind.lower():
                return device_spec(name)
        return None
    return device_spec(platform)
