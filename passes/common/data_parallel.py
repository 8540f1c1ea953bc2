"""The data-parallel layout of a batch argument, one definition for suggest's baselines (the data-parallel and
FSDP versions put every argument that is not state there) and lint's finding about a batch that leaves a mesh
axis idle (passes/rules/idle_batch_axes.py, passes/rules/sl207_idle_mesh_axis.py), so that they recommend the
same layout for it."""

from __future__ import annotations

from collections.abc import Sequence


def data_parallel_layout(shape: Sequence[int], axes: Sequence[str], sizes: dict[str, int],
                         dim: int = 0) -> list[list[str]] | None:
    """``shape``'s dimension ``dim`` (suggest's baselines: 0) split over every one of ``axes`` (in their order), the
    others whole; None where the axes' product does not divide that dimension (or there is none)."""
    total = 1
    for a in axes:
        total *= sizes[a]
    if dim >= len(shape) or shape[dim] % total:
        return None
    return [list(axes) if d == dim else [] for d in range(len(shape))]


def batch_dimension(shape: Sequence[int], sharding: Sequence[Sequence[str]] | None, batch_dims: Sequence[int],
                    axes: Sequence[str], sizes: dict[str, int]) -> int | None:
    """The dimension of a batch argument to split over every one of ``axes``: the first of the dimensions the
    program's matmuls batch over (``batch_dims``: a vmapped batch of problems, whatever dimension it stacks them
    on) that the axes' product divides; where the matmuls batch over none, dimension 0 if the argument is written
    split on it alone (the batch as its user put it, and suggest's baselines' dimension); None otherwise (an
    argument the step does not batch over, or a batch the axes do not divide)."""
    if batch_dims:
        return next((d for d in batch_dims if data_parallel_layout(shape, axes, sizes, d) is not None), None)
    written = list(sharding or [])
    if written and written[0] and not any(written[1:]) and data_parallel_layout(shape, axes, sizes) is not None:
        return 0
    return None
