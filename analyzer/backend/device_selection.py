"""The platform a run compiles for: its devices (virtual CPUs, a GPU or TPU target, the GPUs
at hand), its label in reports, and the warnings when the budget is another device's.
"""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..platforms.gpu_targets import ACCELERATOR_TARGETS, TPU_TARGETS
from ..platforms.presets import find_preset


def platform_label(settings: Settings) -> str:
    """What reports call the platform: the resolved target's label, made once where the devices were
    selected or where none are (backend/run_target.py)."""
    if settings.target is None:
        raise RuntimeError("a platform label asked of settings whose target was never resolved")
    return settings.target.label


# A device preset that is no compile target, and the target that compiles for it.
_TARGET_FOR_PRESET = {"h100-nvl": "h100"}


def run_warnings(settings: Settings) -> list[str]:
    """A budget taken from one device's preset while the figures come from
    another platform's compile: said, since the verdict mixes the two."""
    preset = find_preset(settings.budget_source) if settings.budget_source else None
    if preset is None or preset.name == settings.platform:
        return []
    target = _TARGET_FOR_PRESET.get(preset.name, preset.name)
    budget = f"the budget is the {preset.name} preset's ({format_bytes(settings.budget_bytes or preset.memory_bytes)})"
    if settings.platform == "cpu":
        kind = "TPU" if target in TPU_TARGETS else "GPU"
        return [f"{budget} but the figures come from a CPU compile, which can differ a lot from a {kind}'s: use "
                f"--platform {target} for {kind} figures"]
    if settings.platform in ACCELERATOR_TARGETS and target != settings.platform:
        own = settings.target.bundled_memory_bytes if settings.target is not None else None
        return [f"{budget} but the figures come from a {settings.platform} compile, whose devices have "
                f"{format_bytes(own) if own else 'other memory'}: drop --device (the target's own memory is the "
                f"budget) or compile for it with --platform {target}"]
    return []


def check_lowered_for(lowered, name: str, settings: Settings, where: str) -> None:
    if settings.platform not in ACCELERATOR_TARGETS:
        return
    assignment = jax_adapter.device_assignment(lowered)
    if assignment and assignment[0].platform == "cpu":
        raise ShardLintInputError(
            where, f"target {name!r} was lowered for CPU devices, not the {settings.platform}'s: build the mesh over "
            "the devices the tool selects (take mesh_devices= in shard_lint_targets, or use "
            "jax_shard_lint.analyzer.mesh(shape, names))"
        )


def check_gpu_platform(settings: Settings) -> int | None:
    """The number of GPUs for --platform gpu; a clear error when there are none."""
    if settings.platform != "gpu":
        return None
    gpus = jax_adapter.gpu_devices()
    if not gpus:
        raise ShardLintInputError(
            "--platform gpu", "JAX sees no GPU (is jax[cuda12] installed and a GPU visible?); "
            "use --platform cpu for virtual CPU devices"
        )
    return len(gpus)


def device_processes(lowered) -> tuple[int, ...] | None:
    """The host of each logical device a program was lowered for, when they span several."""
    processes = tuple(d.process_index for d in jax_adapter.device_assignment(lowered))
    return processes if len(set(processes)) > 1 else None
