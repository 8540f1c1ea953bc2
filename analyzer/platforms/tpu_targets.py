"""TPU targets compiled for without a TPU: libtpu's compile-only devices for a
named topology (``v5e:2x4``, ``v5p:4x4x4``), from ``pip install
"jax-shard-lint[tpu]"``. The MaxText ``train_compile`` way, on any machine.

A topology fixes the device count and the hosts (libtpu assigns each device its
host, so collectives are classed as within a host, over ICI, or across hosts,
over DCN). Without ``--topology`` one is chosen from ``--devices``: the most
square grid of the generation's dimensionality.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from math import prod

from ..errors import ShardLintInputError
from .presets import PRESETS


@dataclass(frozen=True)
class TpuGeneration:
    platform: str  # our --platform name
    prefix: str  # libtpu's topology prefix
    dims: int  # 2-D torus (v5e, v6e) or 3-D (v4, v5p)
    devices_per_chip: int  # 1: JAX runs v4 and v5p as megacore, one device per chip
    accelerator_type: str  # what libtpu expects in TPU_ACCELERATOR_TYPE

    @property
    def memory_bytes(self) -> int:
        """HBM per device: the chip's."""
        return PRESETS[self.platform].memory_bytes // self.devices_per_chip


TPU_GENERATIONS = {g.platform: g for g in (
    TpuGeneration("tpu-v4", "v4", 3, 1, "v4-8"),
    TpuGeneration("tpu-v5e", "v5e", 2, 1, "v5litepod-8"),
    TpuGeneration("tpu-v5p", "v5p", 3, 1, "v5p-8"),
    TpuGeneration("tpu-v6e", "v6e", 2, 1, "v6e-8"),
)}
TPU_TARGETS = tuple(TPU_GENERATIONS)
_TOPOLOGY = re.compile(r"^\d+(x\d+){1,2}$")


@dataclass(frozen=True)
class TpuTarget:
    generation: TpuGeneration
    topology: str  # without the generation prefix: 2x4, 4x4x4

    @property
    def topology_name(self) -> str:
        return f"{self.generation.prefix}:{self.topology}"

    @property
    def num_devices(self) -> int:
        return prod(int(d) for d in self.topology.split("x")) * self.generation.devices_per_chip


def _square_grid(chips: int, dims: int) -> list[int] | None:
    """The most even split of ``chips`` into ``dims`` powers of two, smallest first
    (sizes of 1 last)."""
    if chips < 1 or chips & (chips - 1):
        return None
    exp = chips.bit_length() - 1
    parts = [exp // dims + (1 if i < exp % dims else 0) for i in range(dims)]
    grid = sorted(2**p for p in parts if p)
    return grid + [1] * (dims - len(grid))  # libtpu spells a flat slice 2x2x1


def default_topology(generation: TpuGeneration, num_devices: int) -> str:
    chips, rest = divmod(num_devices, generation.devices_per_chip)
    grid = _square_grid(chips, generation.dims) if not rest else None
    if grid is None or (generation.dims == 2 and chips < 4):
        raise ShardLintInputError(
            "--devices", f"no default {generation.platform} topology for {num_devices} devices: pass --topology "
            f"(e.g. {'2x4' if generation.dims == 2 else '2x2x2'}), or a power-of-two device count"
            + (" of at least 4" if generation.dims == 2 else "")
        )
    return "x".join(str(d) for d in grid)


def resolve_target(platform: str, num_devices: int, topology: str | None) -> TpuTarget:
    generation = TPU_GENERATIONS[platform]
    if topology:
        topology = topology.strip().lower().removeprefix(f"{generation.prefix}:")
        if not _TOPOLOGY.match(topology) or len(topology.split("x")) not in (2, 3):
            raise ShardLintInputError("--topology", f"expected a grid like 2x4 or 4x4x4, got {topology!r}")
    else:
        topology = default_topology(generation, num_devices)
    return TpuTarget(generation, topology)


def tpu_devices(target: TpuTarget) -> list:
    from ..adapter import jax_adapter

    try:
        return jax_adapter.tpu_target_devices(target.topology_name, target.generation.accelerator_type)
    except ImportError:
        raise ShardLintInputError(
            f"--platform {target.generation.platform}",
            'compiling for a TPU target needs libtpu: pip install "jax-shard-lint[tpu]"') from None
    except Exception as e:
        if _is_lock_error(str(e)):
            # Never relay libtpu's advice to delete the lock: another live process holds it.
            raise ShardLintInputError(
                f"--platform {target.generation.platform}",
                "libtpu's machine-wide lock is held by another process and ALLOW_MULTIPLE_LIBTPU_LOAD is set to "
                f"{os.environ.get('ALLOW_MULTIPLE_LIBTPU_LOAD')!r}; compile-only targets use no TPU, so unset it "
                "(jax-shard-lint then sets it to 1) or wait for the other process") from None
        raise ShardLintInputError(
            "--topology", f"libtpu has no topology {target.topology_name}: {str(e).splitlines()[0][:200]}") from None


def _is_lock_error(message: str) -> bool:
    """libtpu's refusal to load while another process holds its lock file."""
    text = message.lower()
    return "lockfile" in text or "tpu in use" in text or "already in use by" in text
