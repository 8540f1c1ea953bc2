"""A resolved target as text, for the child processes and Ray tasks an executor runs (executors/): the
asking run's target is handed to each child whole (``--resolved-target``), so the child compiles for it as
it is (the GPU spec it read, the TPU slice it chose, its label and memory) and resolves nothing again."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ...passes.models.device_spec import DeviceSpec
from .gpu_targets import GpuTarget
from .resolved_target import ResolvedTarget
from .tpu_targets import TpuGeneration, TpuTarget


def target_text(target: ResolvedTarget) -> str:
    return json.dumps(asdict(target), sort_keys=True, separators=(",", ":"))


def target_of_text(text: str) -> ResolvedTarget:
    """The target ``target_text`` wrote; ValueError for text it did not write."""
    try:
        fields: dict[str, Any] = json.loads(text)
        tpu, gpu, spec, generation = (fields.pop(k) for k in ("tpu", "gpu", "device_spec", "tpu_generation"))
        return ResolvedTarget(
            **fields,
            gpu=GpuTarget(**gpu) if gpu is not None else None,
            tpu=TpuTarget(TpuGeneration(**tpu["generation"]), tpu["topology"]) if tpu is not None else None,
            tpu_generation=TpuGeneration(**generation) if generation is not None else None,
            device_spec=_device_spec(spec) if spec is not None else None,
        )
    except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a resolved target: {e}") from None


def _device_spec(fields: dict[str, Any]) -> DeviceSpec:
    flops = tuple((name, value) for name, value in fields.pop("matmul_flops_per_s"))
    sources = tuple(fields.pop("sources"))
    return DeviceSpec(**fields, matmul_flops_per_s=flops, sources=sources)
