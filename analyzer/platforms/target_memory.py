"""The memory of one device of a compile target: the budget when none is given."""

from __future__ import annotations


def target_memory(platform: str, target_config: str | None = None) -> int | None:
    """The memory of one device of an accelerator target; None for cpu and gpu."""
    from .gpu_targets import GPU_TARGETS, TPU_TARGETS, load_target

    if platform in GPU_TARGETS:
        return load_target(platform, target_config).memory_bytes
    if platform in TPU_TARGETS:
        from .tpu_targets import TPU_GENERATIONS

        return TPU_GENERATIONS[platform].memory_bytes
    return None
