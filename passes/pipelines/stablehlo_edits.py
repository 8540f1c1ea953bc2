"""What the analyzer reads of the StableHLO it edits and compiles itself (rewrite's pins, the fix checks'
candidates, suggest's versions, checked-in modules), beside the pipelines that analyse it.

Computed here, from the module: the function XLA's import must take as ``@main``, the ops in the walk order
that numbers a new constraint's place, the backward pass's reads of a matmul output's cotangent (which a
constraint written on that output constrains too), the stated sharding constraints a fix check edits (those at a
user's line, those stating a layout) and their candidate specs (the gathered axes kept off, the even
alternatives to an uneven one), and where a constraint on a parameter's loop slice read as a matmul's weight
at a user's line goes (SL102's FSDP weight gather). Read as they are: a module's entry function, why a
checked-in module has no entry, the state round trips (an output returning an input's state), the constraint
ops and a clone of a module to edit."""

from __future__ import annotations

import os

from jaxlib.mlir import ir

from ..common.sharding_text import normalized
from ..models.report import SourceLocation
from ..propagation.loop_weight_reads import LoopWeightReads, loop_weight_reads
from ..propagation.shardy_reference import clone, walk_ops
from ..source.frames import CodeOwnership
from ..stablehlo.module import entry_function, functions, missing_entry, source_of_location
from ..stablehlo.sharding_constraints import (
    StatedConstraint,
    axes_off,
    constraint_ops,
    even_alternatives,
    read_constraints,
)
from .entry import entry_signature
from .fix_checks import FIX_CHECKS

# clone, constraint_ops, entry_function and missing_entry are stablehlo/'s and propagation/'s, handed on on
# purpose: the analyzer may not import those (tests/test_architecture_reexports.py lists them, and why).
__all__ = ["clone", "constraint_ops", "entry_function", "missing_entry",
           "entry_to_rename", "module_ops", "cotangent_reads", "constraints_at", "constraints_stating",
           "gathered_axes_off", "even_choices", "weight_reads_at"]

Spec = list[list[str]]


def entry_to_rename(module: ir.Module) -> ir.OpView | None:
    """The function XLA's import must take as ``@main`` (a module written by hand, or by another tool, may
    name its entry otherwise), or None when the module has a ``@main``."""
    return None if "main" in functions(module) else entry_function(module)


def module_ops(module: ir.Module) -> list[ir.OpView]:
    """Every op of every function, in the walk order that numbers an op (a new constraint's place)."""
    return [op for fn in functions(module).values() for op in walk_ops(fn.regions[0].blocks[0])]


def cotangent_reads(module: ir.Module, indices: set[int]) -> dict[int, list[int]]:
    """Each matmul of ``indices`` (ops in ``module_ops`` order) -> the ops of the backward pass that read its
    output's cotangent: the other dot_generals at its user line whose first operand has the type of its
    output (JAX's transposes of a dot_general take the cotangent first: the input's gradient and the
    weight's). A ``with_sharding_constraint`` the user writes on the matmul's output constrains that
    cotangent too (its transpose is the same constraint on the cotangent), before those reads."""
    ops = module_ops(module)

    def line(op: ir.OpView) -> tuple[str, int] | None:
        src = source_of_location(op.location)
        return (os.path.basename(src.file), src.line) if src is not None else None

    dots = [j for j, op in enumerate(ops) if op.operation.name == "stablehlo.dot_general" and j not in indices]
    out: dict[int, list[int]] = {}
    for i in sorted(indices):
        op = ops[i].operation
        at = line(ops[i]) if op.name == "stablehlo.dot_general" else None
        if at is not None:
            out[i] = [j for j in dots if line(ops[j]) == at and ops[j].operation.operands[0].type == op.results[0].type]
    return out


def constraints_at(module: ir.Module, source: SourceLocation, sharding: Spec | None = None) -> list[StatedConstraint]:
    """The sharding constraints a user's line states (with this ``sharding``, when given): one line may
    state several (a layer called in a loop). Files match by name, as the finding and the module spell
    their paths differently."""
    return [k for k in read_constraints(module) if k.source is not None and k.source.line == source.line
            and os.path.basename(k.source.file) == os.path.basename(source.file)
            and (sharding is None or k.sharding == sharding)]


def constraints_stating(module: ir.Module, target: Spec) -> list[StatedConstraint]:
    """The sharding constraints whose value has ``target``'s rank and states its layout."""
    rank = len(target)
    return [k for k in read_constraints(module)
            if len(k.shape) == rank and normalized(k.sharding, rank) == normalized(target, rank)]


def gathered_axes_off(module: ir.Module, source: SourceLocation, sharding: Spec, gathered: set[str]
                      ) -> tuple[list[StatedConstraint], list[Spec]]:
    """The constraints at a user's line stating ``sharding`` and the specs that keep the ``gathered`` mesh
    axes off the dimensions they shard (moved to another dimension they divide, or dropped); none where no
    axis is gathered, or the line's constraints are of several shapes."""
    stated = constraints_at(module, source, sharding)
    if not gathered or not stated or len({k.shape for k in stated}) != 1:
        return [], []
    return stated, axes_off(stated[0].shape, sharding, gathered, entry_signature(module, FIX_CHECKS).mesh)


def even_choices(module: ir.Module, ordinals: set[int]) -> dict[int, list[Spec]]:
    """Each of these constraints (their ordinals in walk order) -> the specs whose every dimension divides,
    nearest its stated one first."""
    mesh = entry_signature(module, FIX_CHECKS).mesh
    return {c.ordinal: even_alternatives(c.shape, c.sharding, mesh)
            for c in read_constraints(module) if c.ordinal in ordinals}


def weight_reads_at(module: ir.Module, source: SourceLocation, argument: int, shape: tuple[int, ...],
                    ownership: CodeOwnership) -> LoopWeightReads | None:
    """The matmuls at a user's line that read entry argument ``argument`` (of ``shape``, or its loop slice) as
    an operand, and the weight's cotangents there (propagation/loop_weight_reads.py)."""
    return loop_weight_reads(module, source, argument, shape, ownership)
