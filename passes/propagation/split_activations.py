"""Where an activation's split comes from: the matmul whose weight puts a mesh axis on it.

A matmul that reads a value whole along a dimension (it contracts it) while Shardy's propagation leaves
that value split on a mesh axis there makes XLA gather it back. When the value is no argument (a residual
stream, the normed input of a layer), the argument whose sharding causes the gather is not the matmul's
own weight: it is the weight of the matmul that *produced* the split, whose output dimension holds the
axis, and the values in between (a residual add, a loop carry, a rematerialized call) carry it to the
read. SL105 names that matmul and its weight (an FSDP x tensor-parallel block: the mixer's output on
``tp`` leaves the residual stream on ``tp``, and each later matmul that needs the whole model dimension
gathers it), and compiles a constraint on the value it produces and the weight's axis moved.

Each read is found in Shardy's own propagation of the module (the pipeline XLA runs); the walk back goes
through ops whose result and operand have the same shape (elementwise ops), a call's result into its
callee's return, a loop's result into its body's yield, and a loop body's or callee's argument out to what
feeds it, keeping only values that still hold the axis on that dimension.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.breadth_first import breadth_first
from ..common.device_groups import MeshInfo
from ..models.errors import ShardyRejected
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import entry_function, functions, sharding_axes, source_of_location
from .shardy_reference import OP_ID, call_sites, result_shardings, shardy_propagated, tagged_clone, walk_ops

_DIMS = re.compile(r"(lhs_batching|rhs_batching|lhs_contracting|rhs_contracting)_dimensions = \[([\d, ]*)\]")
# Values walked back from one read: a bound on a large program.
MAX_WALK = 5_000


@dataclass(frozen=True)
class SplitOrigin:
    """The matmul whose weight's output dimension holds the axis: its result is where the split begins."""

    source: SourceLocation | None
    op_index: int  # in shardy_reference.walk_ops over the module's functions (a constraint's insertion point)
    result: int
    shape: tuple[int, ...]
    sharding: list[list[str]]
    weight: int | None  # the entry argument holding the axis on the dimension the matmul carries to its output
    weight_dim: int | None  # that argument's dimension


@dataclass(frozen=True)
class SplitRead:
    """A matmul operand that propagation splits on ``axes`` along a dimension the matmul contracts."""

    source: SourceLocation | None
    shape: tuple[int, ...]
    sharding: list[list[str]]
    dim: int
    axes: frozenset[str]
    origins: tuple[SplitOrigin, ...]


def _dot_dims(op: ir.OpView) -> dict[str, list[int]]:
    text = str(op.attributes["dot_dimension_numbers"]) if "dot_dimension_numbers" in op.attributes else ""
    found = {k: [int(n) for n in v.replace(" ", "").split(",") if n] for k, v in _DIMS.findall(text)}
    return {k: found.get(k, []) for k in ("lhs_batching", "rhs_batching", "lhs_contracting", "rhs_contracting")}


def _rank(value: ir.Value[Any]) -> int:
    return len(ir.RankedTensorType(value.type).shape) if isinstance(value.type, ir.RankedTensorType) else -1


def _output_operand_dim(op: ir.OpView, dim: int) -> tuple[int, int] | None:
    """Which operand (0: lhs, 1: rhs) and which of its dimensions a dot_general's result dimension comes from."""
    dims = _dot_dims(op)
    if dim < len(dims["lhs_batching"]):
        return 0, dims["lhs_batching"][dim]
    free = [(0, d) for d in range(_rank(op.operands[0])) if d not in dims["lhs_batching"] + dims["lhs_contracting"]]
    free += [(1, d) for d in range(_rank(op.operands[1])) if d not in dims["rhs_batching"] + dims["rhs_contracting"]]
    k = dim - len(dims["lhs_batching"])
    return free[k] if 0 <= k < len(free) else None


def _names(held: list[str]) -> set[str]:
    return {a.split(":")[0] for a in held}


class Walk:
    """The propagated module's values: each one's sharding, and the ops and functions to walk back through."""

    def __init__(self, module: ir.Module, ownership: CodeOwnership):
        self.module, self.ownership = module, ownership
        self.funcs = functions(module)
        self.entry = entry_function(module)
        self.callers = call_sites(self.funcs)

    @staticmethod
    def sharding(value: ir.Value[Any]) -> list[list[str]] | None:
        if isinstance(value.owner, ir.Block) or not isinstance(value.type, ir.RankedTensorType):
            return None
        shardings = result_shardings(value.owner)
        number = ir.OpResult(value).result_number
        if number >= len(shardings):
            return None
        found = sharding_axes(sdy.TensorShardingAttr(shardings[number]))
        return found + [[] for _ in range(_rank(value) - len(found))]

    def feeders(self, value: ir.Value[Any]) -> list[ir.Value[Any]]:
        """The values ``value`` is the same array as, or computed elementwise from."""
        if isinstance(value.owner, ir.Block):
            number = ir.BlockArgument(value).arg_number
            parent = value.owner.owner
            if parent.operation.name == "func.func":
                callee = ir.StringAttr(parent.attributes["sym_name"]).value
                return [c.operands[number] for c in self.callers.get(callee, []) if number < len(c.operands)]
            if parent.operation.name == "stablehlo.while" and value.owner == parent.regions[1].blocks[0]:
                body_yield = list(parent.regions[1].blocks[0].operations)[-1]
                return [body_yield.operands[number], parent.operands[number]]
            return []
        op: Any = value.owner
        number = ir.OpResult(value).result_number
        name = op.name
        if name == "func.call":
            fn: Any = self.funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            return [list(fn.regions[0].blocks[0].operations)[-1].operands[number]] if fn is not None else []
        if name == "stablehlo.while":
            return [list(op.regions[1].blocks[0].operations)[-1].operands[number]]
        if name in ("sdy.sharding_constraint", "sdy.reshard"):
            return []  # a stated layout: the split there is the user's
        shape = ir.RankedTensorType(value.type).shape if isinstance(value.type, ir.RankedTensorType) else None
        return [o for o in op.operands if isinstance(o.type, ir.RankedTensorType)
                and ir.RankedTensorType(o.type).shape == shape]

    def arguments_of(self, value: ir.Value[Any]) -> list[int]:
        """The entry arguments ``value`` is computed from, nearest first (the weight behind a matmul operand:
        a reshape or a loop's slice of it)."""
        return _entry_arguments(self, value, lambda v: self.feeders(v) if isinstance(v.owner, ir.Block)
                                or v.owner.name == "func.call" else v.owner.operands)

    def origins(self, start: ir.Value[Any], dim: int, axes: set[str], arguments: list[list[list[str]]],
                shapes: list[tuple[int, ...]]) -> tuple[SplitOrigin, ...]:
        """The matmuls whose weight's output dimension holds one of ``axes`` that the split of ``start``'s
        dimension ``dim`` is carried from (elementwise ops, calls, loop carries in between)."""
        found: dict[int, SplitOrigin] = {}

        def keeps_split(value: ir.Value[Any]) -> bool:
            sharding = self.sharding(value)
            return sharding is None or bool(_names(sharding[dim]) & axes)

        def is_matmul(value: ir.Value[Any]) -> bool:
            return not isinstance(value.owner, ir.Block) and value.owner.name == "stablehlo.dot_general"

        # A value not split there does not carry the split; a matmul is where it starts (or it has no origin).
        def carried_from(value: ir.Value[Any]) -> list[ir.Value[Any]]:
            return self.feeders(value) if keeps_split(value) and not is_matmul(value) else []

        for value in breadth_first([start], carried_from, MAX_WALK):
            if keeps_split(value) and is_matmul(value):
                origin = self._origin(value, dim, axes, arguments, shapes)
                if origin is not None:
                    found.setdefault(origin.op_index, origin)
        return tuple(found.values())

    def _origin(self, value: ir.Value[Any], dim: int, axes: set[str], arguments: list[list[list[str]]],
                shapes: list[tuple[int, ...]]) -> SplitOrigin | None:
        op: Any = value.owner
        mapped = _output_operand_dim(op, dim)
        if mapped is None or OP_ID not in op.attributes:
            return None
        operand, operand_dim = op.operands[mapped[0]], mapped[1]
        size = ir.RankedTensorType(operand.type).shape[operand_dim]
        # The nearest argument holding the axis on a dimension of that size: the weight that puts it there.
        held = [(i, d) for i in self.arguments_of(operand) if i < len(arguments)
                for d, (n, spec) in enumerate(zip(shapes[i], arguments[i])) if n == size and _names(spec) & axes]
        if not held:
            return None  # no weight puts the axis there: propagation carried it from elsewhere
        weight, weight_dim = held[0]
        sharding = self.sharding(value) or []
        return SplitOrigin(source_of_location(op.location, self.ownership), ir.IntegerAttr(op.attributes[OP_ID]).value,
                           0, tuple(int(n) for n in ir.RankedTensorType(value.type).shape), sharding, weight,
                           weight_dim)


def split_reads(module: ir.Module, mesh: MeshInfo, arguments: list[list[list[str]]], shapes: list[tuple[int, ...]],
                lines: frozenset[tuple[str, int]], ownership: CodeOwnership = DEFAULT_OWNERSHIP
                ) -> tuple[SplitRead, ...]:
    """Every matmul at one of ``lines`` (file, line: where XLA gathers) whose operand propagation splits along a
    dimension the matmul contracts, with the matmuls whose weight puts that split on it; ``arguments``/``shapes``:
    the entry arguments' shardings and shapes."""
    if not mesh.axes or mesh.size <= 1:
        return ()
    try:
        propagated = shardy_propagated(tagged_clone(module))
    except ShardyRejected:
        return ()
    walk = Walk(propagated, ownership)
    reads: list[SplitRead] = []
    for fn in walk.funcs.values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            if op.operation.name != "stablehlo.dot_general":
                continue
            source = source_of_location(op.location, ownership)
            if source is None or (source.file, source.line) not in lines:
                continue  # no gather there: its walk would be spent for nothing
            dims = _dot_dims(op)
            for side, contracting in ((0, dims["lhs_contracting"]), (1, dims["rhs_contracting"])):
                operand = op.operands[side]
                sharding = walk.sharding(operand)
                if sharding is None:
                    continue
                for d in contracting:
                    axes = _names(sharding[d]) if d < len(sharding) else set()
                    if not axes:
                        continue
                    reads.append(SplitRead(source,
                                           tuple(int(n) for n in ir.RankedTensorType(operand.type).shape),
                                           sharding, d, frozenset(axes),
                                           walk.origins(operand, d, axes, arguments, shapes)))
    return tuple(reads)


def argument_batch_dims(module: ir.Module) -> dict[int, tuple[int, ...]]:
    """Entry argument -> its dimensions a matmul (``dot_general``) batches over, where the matmul reads the
    argument itself (the same shape: through calls, loop carries and elementwise ops only), e.g. an MoE's
    expert weights ``EDH`` read by ``EnD,EDH->EnH`` batch their expert dimension 0. A weight sharded on another
    dimension is moved there by an all-to-all on every step (SL105's candidate: the axis on the batch dimension,
    where the matmul reads it). Read in the module as lowered: no propagation is run."""
    walk = Walk(module, DEFAULT_OWNERSHIP)
    found: dict[int, set[int]] = {}
    for fn in walk.funcs.values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            if op.operation.name != "stablehlo.dot_general":
                continue
            dims = _dot_dims(op)
            for side, batching in ((0, dims["lhs_batching"]), (1, dims["rhs_batching"])):
                if not batching:
                    continue
                for argument in _same_array_arguments(walk, op.operands[side]):
                    found.setdefault(argument, set()).update(batching)
    return {k: tuple(sorted(v)) for k, v in sorted(found.items())}


def _same_array_arguments(walk: Walk, value: ir.Value[Any]) -> list[int]:
    """The entry arguments ``value`` is (the same shape and dimensions: through calls, loop carries and ops
    whose operand has the result's shape)."""
    # A transpose maps dimensions: the array after it is another.
    return _entry_arguments(walk, value, lambda v: walk.feeders(v) if isinstance(v.owner, ir.Block)
                            or v.owner.name != "stablehlo.transpose" else ())


def _entry_arguments(walk: Walk, value: ir.Value[Any],
                     feeding: Callable[[ir.Value[Any]], Iterable[ir.Value[Any]]]) -> list[int]:
    """The entry arguments reached from ``value``, nearest first, walking back breadth-first through the values
    ``feeding`` gives each one, at most ``MAX_WALK`` values."""
    def onward(v: ir.Value[Any]) -> Iterable[ir.Value[Any]]:
        return () if _is_entry_argument(walk, v) else feeding(v)

    return [ir.BlockArgument(v).arg_number for v in breadth_first([value], onward, MAX_WALK)
            if _is_entry_argument(walk, v)]


def _is_entry_argument(walk: Walk, v: ir.Value[Any]) -> bool:
    return isinstance(v.owner, ir.Block) and v.owner.owner == walk.entry.operation

