"""Where a user's line reads a parameter's loop slice as a matmul's weight: what a ``with_sharding_constraint`` on
that weight at the line lowers to, found in the module as written.

A layer scan slices each stacked parameter (``params['layers']['down']``, ``f32[8,4096,1024]``) per iteration,
and the layer's matmul reads the slice (``f32[4096,1024]``) as its weight. ``w = with_sharding_constraint(w, s)``
there lowers to a constraint on every use of that slice at the line (the forward matmul, the backward's matmul
that propagates the gradient through the weight, in a rematerialized layer too) and, by the constraint's
transpose, on the weight's cotangent (the matmul at the line that computes the weight's gradient, or the
transpose of its result). SL102's FSDP fix compiles exactly that: the weight gathered in the loop body, so XLA
no longer gathers the activation the weight's axis would otherwise be moved onto.

The weight is the operand that is the argument itself, followed back only through what keeps it the same array
or a slice of it (calls, a loop's carry, dynamic slices, reshapes, optimization barriers, constraints): an
activation computed from the weight is not the weight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from jaxlib.mlir import ir

from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import entry_function, functions, source_of_location
from .shardy_reference import call_sites, walk_ops

# Ops whose first operand's array their result is, or a slice or reshaping of it.
_SAME_ARRAY = frozenset({
    "stablehlo.dynamic_slice", "stablehlo.slice", "stablehlo.reshape", "stablehlo.convert",
    "stablehlo.bitcast_convert", "sdy.sharding_constraint", "sdy.reshard", "stablehlo.copy",
})
# Values followed back from one operand: a bound on a large program.
_MAX_STEPS = 200


@dataclass(frozen=True)
class WeightRead:
    """A matmul operand that is the argument's slice: where the constraint goes, before the matmul."""

    op_index: int  # the dot_general, in walk order over the module's functions
    operand: int


@dataclass(frozen=True)
class LoopWeightReads:
    """The argument's slice read as a matmul weight at one line, and its cotangent there."""

    reads: tuple[WeightRead, ...]
    cotangents: tuple[int, ...]  # ops (walk order) whose result 0 is the weight's gradient at the line
    slice_shape: tuple[int, ...]
    stacked: int  # the argument's leading dimensions the loop slices away (0: read whole)


def _shape(value: ir.Value[Any]) -> tuple[int, ...] | None:
    return tuple(ir.RankedTensorType(value.type).shape) if isinstance(value.type, ir.RankedTensorType) else None


class _Chain:
    """Follows a value back to the entry argument it is (a slice of), through calls and loop carries."""

    def __init__(self, module: ir.Module):
        self.funcs = functions(module)
        self.entry = entry_function(module)
        self.callers = call_sites(self.funcs)

    def argument(self, value: ir.Value[Any]) -> int | None:
        """The entry argument ``value`` is the same array as (or a slice of), or None."""
        todo: list[tuple[ir.Value[Any], tuple[ir.OpView, ...]]] = [(value, ())]
        steps = 0
        while todo and steps < _MAX_STEPS:
            steps += 1
            v, calls = todo.pop()
            if isinstance(v.owner, ir.Block):
                number = ir.BlockArgument(v).arg_number
                parent = v.owner.owner
                if parent.operation == self.entry.operation:
                    return number
                if parent.operation.name == "func.func":
                    sites = [calls[-1]] if calls else self.callers.get(
                        ir.StringAttr(parent.attributes["sym_name"]).value, [])
                    todo.extend((c.operands[number], calls[:-1]) for c in sites if number < len(c.operands))
                elif parent.operation.name == "stablehlo.while" and number < len(parent.operands):
                    todo.append((parent.operands[number], calls))  # the carry as the loop starts
                continue
            op: Any = v.owner
            number = ir.OpResult(v).result_number
            if op.name == "func.call":
                fn: Any = self.funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                if fn is not None:
                    todo.append((list(fn.regions[0].blocks[0].operations)[-1].operands[number], calls + (op,)))
            elif op.name == "stablehlo.optimization_barrier":
                todo.append((op.operands[number], calls))
            elif op.name in _SAME_ARRAY and len(op.operands):
                todo.append((op.operands[0], calls))
        return None


def _at_line(op: ir.OpView, source: SourceLocation, ownership: CodeOwnership) -> bool:
    found = source_of_location(op.location, ownership)
    return (found is not None and found.line == source.line
            and os.path.basename(found.file) == os.path.basename(source.file))


def loop_weight_reads(module: ir.Module, source: SourceLocation, argument: int, argument_shape: tuple[int, ...],
                      ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> LoopWeightReads | None:
    """The matmuls at ``source`` that read entry argument ``argument`` (or its loop slice) as an operand, and the
    weight's cotangents there; None where no matmul at the line reads it."""
    chain = _Chain(module)
    ops = [op for fn in functions(module).values() for op in walk_ops(fn.regions[0].blocks[0])]
    at_line = [(k, op) for k, op in enumerate(ops) if _at_line(op, source, ownership)]
    reads: list[WeightRead] = []
    slice_shape: tuple[int, ...] | None = None
    for k, op in at_line:
        if op.operation.name != "stablehlo.dot_general":
            continue
        for i, operand in enumerate(op.operands):
            shape = _shape(operand)
            if (shape is not None and shape == argument_shape[len(argument_shape) - len(shape):]
                    and chain.argument(operand) == argument):
                reads.append(WeightRead(k, i))
                slice_shape = shape
    if not reads or slice_shape is None:
        return None
    read_ops = {r.op_index for r in reads}
    # The gradient: a matmul at the line of the weight's shape that does not read it, or the transpose of one.
    transposed = {k: op for k, op in at_line if op.operation.name == "stablehlo.transpose"
                  and _shape(op.results[0]) == slice_shape
                  and not isinstance(op.operands[0].owner, ir.Block)
                  and op.operands[0].owner.name == "stablehlo.dot_general"}
    fed = {k for k, op in at_line if any(t.operands[0].owner == op.operation for t in transposed.values())}
    gradients = [k for k, op in at_line if op.operation.name == "stablehlo.dot_general" and k not in read_ops
                 and k not in fed and _shape(op.results[0]) == slice_shape]
    return LoopWeightReads(tuple(reads), tuple(sorted(gradients + list(transposed))), slice_shape,
                           len(argument_shape) - len(slice_shape))
