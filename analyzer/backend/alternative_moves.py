"""A finding's further candidates, tried where its first fix is not measured better (fix_checks.py): the same
axes on the argument's other dimension, or the rule's other candidates (SL103's contracted axes moved each way)."""

from __future__ import annotations

from ...passes.common.sharding_text import pspec_text
from ...passes.models.report import Finding, TensorInfo


def other_dimension(f: Finding, inputs: list[TensorInfo], mesh: dict[str, int]) -> Finding | None:
    """The suggestion on the argument's last dimension its axes divide, where the rule suggested another."""
    spec = f.suggested_sharding
    t = next((t for t in inputs if t.path == f.parameter), None)
    if spec is None or t is None:
        return None
    [dim] = [d for d, axes in enumerate(spec) if axes]
    size = 1
    for axis in spec[dim]:
        size *= mesh.get(axis, 1)
    last = max(d for d, n in enumerate(t.shape) if n % size == 0 and n >= size)
    if last == dim:
        return None
    moved: list[list[str]] = [[] for _ in spec]
    moved[last] = spec[dim]
    return f.model_copy(update={"suggested_sharding": moved, "fix": f"shard {t.path} as {pspec_text(moved)}"})


def other_candidates(f: Finding) -> list[Finding]:
    """The finding with each further candidate of its rule (SL103's contracted axes moved each way) as its fix."""
    if f.parameter is None or f.suggested_sharding is None or f.fix is None or len(f.candidates) < 2:
        return []
    written = f"as {pspec_text(f.suggested_sharding)} instead"
    return [f.model_copy(update={"suggested_sharding": c.sharding,
                                 "fix": f.fix.replace(written, f"as {pspec_text(c.sharding)} instead", 1)})
            for c in f.candidates[1:] if c.value == f.parameter and c.sharding != f.suggested_sharding]
