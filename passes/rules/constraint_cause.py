"""The user's ``with_sharding_constraint`` a collective undoes, where no argument's sharding causes it.

A loop body that constrains its carry to a sharding the next op reads along (a running sum along the
dimension the constraint shards) makes XLA gather the carry back every iteration: the cause is the
constraint, written at the user's line, not any argument (the carry's start may be sharded otherwise).
The compiled program keeps no trace of the constraint (the partitioner consumes it), so the match is
by what the gather does to it: the constraint's value, with the collective's mesh axes undone, is the
collective's result, and the constraint shards that value on those axes; one constraint in the
collective's source file must match (two distinct ones name no cause).
"""

from __future__ import annotations

from math import prod

from ..common.shapes import mlir_dtype_to_hlo
from ..common.sharding_text import constraint_change_text
from ..hlo.collective_intent import squeezed
from ..hlo.collective_parameter import axis_size
from ..models.report import Collective, ConstraintCause
from ..stablehlo.sharding_constraints import StatedConstraint, axes_off
from .context import RuleContext


def _undone(k: StatedConstraint, names: set[str], sizes: dict[str, int]) -> tuple[int, ...]:
    """The constrained value's per-device shape with the axes ``names`` gathered back."""
    dims = list(k.sharding) + [[]] * (len(k.shape) - len(k.sharding))
    return tuple(-(-n // prod(axis_size(a, sizes) for a in axes if a.split(":")[0] not in names))
                 for n, axes in zip(k.shape, dims))


def constraint_of(ctx: RuleContext, c: Collective) -> ConstraintCause | None:
    """The constraint whose sharding the all-gather ``c`` undoes, if exactly one does."""
    k = stated_constraint_of(ctx, c)
    return ConstraintCause(source=k.source, sharding=[list(a) for a in k.sharding]) if k is not None else None


def constraint_fix(ctx: RuleContext, c: Collective) -> str | None:
    """The constraint ``c`` undoes with the gathered axes kept off the dimension the op reads along (moved to
    another dimension they divide, else dropped): a candidate the fix check compiles with the others."""
    k = stated_constraint_of(ctx, c)
    if k is None:
        return None
    gathered = sorted({a.split(":")[0] for a in c.mesh_axes})
    choices = axes_off(k.shape, k.sharding, set(gathered), ctx.signature.mesh)
    return (constraint_change_text(k.source.line if k.source else None, choices[0], k.sharding, gathered)
            if choices else None)


def stated_constraint_of(ctx: RuleContext, c: Collective) -> StatedConstraint | None:
    """The stated constraint whose sharding the all-gather ``c`` undoes, if exactly one does."""
    if c.kind != "all-gather" or not c.mesh_axes or c.mesh_axes[0].startswith("<"):
        return None
    names = {a.split(":")[0] for a in c.mesh_axes}
    sizes = dict(ctx.signature.mesh.axes)
    found = {}
    for k in ctx.constraints:
        if c.source is not None and k.source is not None and k.source.file != c.source.file:
            continue
        if mlir_dtype_to_hlo(k.element_type) != c.dtype:
            continue
        if not any(a.split(":")[0] in names for axes in k.sharding for a in axes):
            continue
        if squeezed(_undone(k, names, sizes)) == squeezed(tuple(c.shape)):
            found[(str(k.source), repr(k.sharding))] = k
    if len(found) != 1:
        return None
    (k,) = found.values()
    return k
