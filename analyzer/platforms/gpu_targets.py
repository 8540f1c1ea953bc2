"""GPU targets compiled for without a GPU: each is a GpuTargetConfigProto text
shipped in ``analyzer/data/gpu_targets/`` (or the user's own with
``--target-config``), turned into compile-only devices by JAX's CUDA PJRT
plugin (``pip install "jax-shard-lint[gpu]"``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources

from ..errors import ShardLintInputError

GPU_TARGETS = ("h100", "h200", "b200", "a100-80g", "a100-40g")
TPU_TARGETS = ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")  # analyzer/tpu_targets.py
# Accelerators compiled for without one: figures are the accelerator's, execution is impossible.
ACCELERATOR_TARGETS = GPU_TARGETS + TPU_TARGETS
PLATFORMS = ("cpu", "gpu") + ACCELERATOR_TARGETS


@dataclass(frozen=True)
class GpuTarget:
    name: str
    spec_text: str
    description: str
    memory_bytes: int | None


def _parse(name: str, text: str, where: str) -> GpuTarget:
    if "gpu_device_info" not in text:
        raise ShardLintInputError(where, "not a GpuTargetConfigProto (no gpu_device_info)")
    memory = re.search(r"device_memory_size:\s*(\d+)", text)
    desc = re.search(r'device_description_str:\s*"([^"]*)"', text)
    return GpuTarget(name, text, desc.group(1) if desc else name, int(memory.group(1)) if memory else None)


def load_target(name: str, config_file: str | None = None) -> GpuTarget:
    if config_file:
        if not os.path.isfile(config_file):
            raise ShardLintInputError(config_file, "no such file")
        with open(config_file, encoding="utf-8") as f:
            return _parse(name, f.read(), config_file)
    if name not in GPU_TARGETS:
        raise ShardLintInputError("--platform", f"unknown GPU target {name!r} (known: {', '.join(GPU_TARGETS)})")
    text = resources.files("jax_shard_lint.analyzer").joinpath("data", "gpu_targets", f"{name}.txtpb").read_text()
    return _parse(name, text, f"{name}.txtpb")


def target_devices(target: GpuTarget, num_devices: int, hosts: int) -> list:
    from ..adapter import jax_adapter

    if num_devices % hosts:
        raise ShardLintInputError("--hosts", f"{num_devices} devices do not split evenly over {hosts} hosts")
    try:
        return jax_adapter.gpu_target_devices(target.spec_text, num_devices, hosts)
    except ImportError:
        raise ShardLintInputError(
            f"--platform {target.name}", 'compiling for a GPU target needs the CUDA PJRT plugin: '
            'pip install "jax-shard-lint[gpu]"'
        ) from None
    except Exception as e:
        raise ShardLintInputError(f"--platform {target.name}", f"could not create the target's devices: {e}") from None
