"""The data-parallel layout of a batch argument, one definition for suggest's baselines (the data-parallel and
FSDP versions put every argument that is not state there) and lint's finding about a batch that leaves a mesh
axis idle (passes/rules/idle_batch_axes.py), so that the two recommend the same layout for it."""

from __future__ import annotations

from collections.abc import Sequence


def data_parallel_layout(shape: Sequence[int], axes: Sequence[str], sizes: dict[str, int]) -> list[list[str]] | None:
    """``shape``'s dimension 0 split over every one of ``axes`` (in their order), the others whole; None where
    the axes' product does not divide that dimension (or there is none)."""
    total = 1
    for a in axes:
        total *= sizes[a]
    if not shape or shape[0] % total:
        return None
    return [list(axes) if d == 0 else [] for d in range(len(shape))]
