"""Values that no stated sharding cuts unevenly, but that Shardy's propagation
shards on a dimension its axes do not divide, which XLA then pads.

A 16-row array sharded 8 ways padded (``jnp.pad``) or concatenated to 20 rows
keeps its operand's sharding: 20 rows on 8 devices, which XLA's partitioner
holds as 3 rows per device (24 in all, 4 of them padding). No constraint says
so: propagation chose it. Each value is read from Shardy's own propagation of
the module (the pipeline XLA runs) and kept where the compiled program holds
its padded per-device shape, as for a stated constraint (SL204). A value is
reported where the unevenness begins: its operands are evenly sharded (the
users that inherit it are the same cause), at the user's line. A stated
constraint's own uneven cut (its axes on a dimension of that size) is SL204's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.breadth_first import breadth_first
from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes, mlir_dtype_to_hlo
from ..models.errors import ShardyRejected
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import axis_label_size, entry_function, functions, sharding_axes, source_of_location
from ..stablehlo.sharding_constraints import StatedConstraint
from .shardy_reference import OP_ID, call_sites, result_shardings, shardy_propagated, tagged_clone, walk_ops

# Ops whose result sharding is stated, not propagated (SL204's, a reshard, a shard_map), or stands for
# a callee's (the callee's own ops are read).
_STATED = frozenset({"sdy.sharding_constraint", "sdy.reshard", "sdy.manual_computation", "func.call",
                     "func.return", "stablehlo.return", "sdy.return"})


@dataclass(frozen=True)
class StatedCut:
    """A ``with_sharding_constraint`` (or reshard) a padded value is computed from: its line and sharding."""

    source: SourceLocation | None
    sharding: list[list[str]]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PropagatedPadding:
    """A value Shardy's propagation shards unevenly and the compiled program holds padded."""

    op: str  # the StableHLO op that makes it (stablehlo.pad, stablehlo.concatenate)
    # That op's index in the module's walk (shardy_reference.walk_ops over its functions) and which of its
    # results the value is: where SL206's fix check inserts the constraint it compiles.
    op_index: int
    result: int
    shape: tuple[int, ...]
    dtype: str  # HLO spelling
    sharding: list[list[str]]
    local_shape: tuple[int, ...]  # per device, as compiled
    ways: tuple[int, ...]  # how many shards each dimension is cut into
    uneven_dims: tuple[int, ...]
    source: SourceLocation | None
    # The entry function's arguments the value is computed from, nearest first (a breadth-first walk back
    # through its operands, calls and loop carries): the one holding the uneven axes is the one whose
    # sharding propagation gave it (SL206 names it).
    arguments: tuple[int, ...] = ()
    # The user's sharding constraints the walk back stops at (whose result's sharding is stated), nearest
    # first: where no argument holds the uneven axes, the one that does is the cause SL206 names.
    constraints: tuple[StatedCut, ...] = ()

    @property
    def uneven_axes(self) -> frozenset[str]:
        """The mesh axes that cut a dimension unevenly (sub-axes by their axis)."""
        return frozenset(a.split(":")[0] for d in self.uneven_dims for a in self.sharding[d])

    @property
    def local_bytes(self) -> int:
        return array_bytes(self.dtype, self.local_shape)

    @property
    def padding_bytes(self) -> int:
        """Padding a device holds beyond an even split (rounded down)."""
        return self.local_bytes - array_bytes(self.dtype, self.shape) // prod(self.ways)


def _ways(sharding: list[list[str]], mesh: MeshInfo) -> list[int]:
    return [prod(axis_label_size(a, mesh) for a in axes) for axes in sharding]


def propagated_padded_values(
    module: ir.Module, mesh: MeshInfo, compiled: frozenset[tuple[str, tuple[int, ...]]],
    stated: tuple[StatedConstraint, ...] = (), ownership: CodeOwnership = DEFAULT_OWNERSHIP,
) -> tuple[PropagatedPadding, ...]:
    """Where an uneven propagated sharding begins, one value per user line (the one with the most padding);
    ``compiled``: (dtype, dims) of the compiled program's values, hlo/layout_waste.py."""
    if not mesh.axes or mesh.size <= 1:
        return ()
    try:
        propagated = shardy_propagated(tagged_clone(module))
    except ShardyRejected:
        return ()
    stated_cuts = {(c.shape[d], tuple(c.sharding[d])) for c in stated for d in c.uneven_dims(mesh)}
    uneven_values: set[ir.Value[Any]] = set()
    found: dict[tuple[str, int] | None, PropagatedPadding] = {}
    ops: dict[int, ir.OpView] = {}  # each found value's op, by its index: walked back once it is kept
    for fn in functions(propagated).values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            name = op.operation.name
            index = ir.IntegerAttr(op.attributes[OP_ID]).value if OP_ID in op.attributes else None
            for result, (value, attr) in enumerate(zip(op.results, result_shardings(op))):
                if not isinstance(value.type, ir.RankedTensorType):
                    continue
                ty = ir.RankedTensorType(value.type)
                shape = tuple(int(n) for n in ty.shape)
                sharding = sharding_axes(sdy.TensorShardingAttr(attr))
                sharding += [[]] * (len(shape) - len(sharding))
                ways = _ways(sharding, mesh)
                # A dimension smaller than its shards' count is a whole copy on each device (a
                # keepdims reduction's 1 on 8 devices), not a padded cut.
                uneven = tuple(d for d, (n, k) in enumerate(zip(shape, ways)) if k > 1 and n % k and n > 1)
                if not uneven:
                    continue
                uneven_values.add(value)
                if name in _STATED or any((shape[d], tuple(sharding[d])) in stated_cuts for d in uneven):
                    continue
                if any(operand in uneven_values for operand in op.operands):
                    continue  # the same cut, inherited: the op that began it is reported
                local = tuple(-(-n // k) for n, k in zip(shape, ways))
                dtype = mlir_dtype_to_hlo(str(ty.element_type))
                if (dtype, local) not in compiled or index is None:
                    continue  # fused away or kept whole: nothing padded to show (or an op Shardy made)
                source = source_of_location(op.location, ownership)
                value_found = PropagatedPadding(name, index, result, shape, dtype, sharding, local, tuple(ways),
                                                uneven, source)
                key = (source.file, source.line) if source else None
                if key not in found or found[key].padding_bytes < value_found.padding_bytes:
                    found[key], ops[index] = value_found, op
    if None in found and len(found) > 1:  # a library op's (jnp.pad's body): the user's line stands for it
        del found[None]
    if not found:
        return ()
    callers = call_sites(functions(propagated))
    return tuple(replace(p, arguments=arguments, constraints=constraints) for p in found.values()
                 for arguments, constraints in [_arguments_of(ops[p.op_index], propagated, callers, ownership)])


# Ops whose result's sharding is stated: propagation carries no argument's sharding through them.
_STATES_SHARDING = frozenset({"sdy.sharding_constraint", "sdy.reshard"})
# Values walked back from a padded value to the arguments it is computed from: a bound on a large program.
_MAX_WALK = 20_000


def _arguments_of(op: ir.OpView, module: ir.Module, callers: dict[str, list[ir.OpView]],
                  ownership: CodeOwnership) -> tuple[tuple[int, ...], tuple[StatedCut, ...]]:
    """The entry function's arguments ``op``'s operands are computed from, nearest first: each value back
    through the op that makes it (not through a stated sharding, a constraint or a reshard, whose result's
    sharding is the constraint's), a callee's argument through its calls' operands, a region's (a loop
    body's carry) through its op's operands; and the constraints the walk stops at, nearest first."""
    entry = entry_function(module)
    found: list[int] = []
    stated: list[StatedCut] = []

    def behind(value: ir.Value[Any]) -> Iterable[ir.Value[Any]]:
        if isinstance(value.owner, ir.Block):
            number = ir.BlockArgument(value).arg_number
            parent = value.owner.owner
            if parent == entry.operation:
                return ()
            if parent.name == "func.func":
                callee = ir.StringAttr(parent.attributes["sym_name"]).value
                return [c.operands[number] for c in callers.get(callee, []) if number < len(c.operands)]
            return parent.operands
        return value.owner.operands if value.owner.name not in _STATES_SHARDING else ()

    for value in breadth_first(op.operands, behind, _MAX_WALK):
        if isinstance(value.owner, ir.Block):
            if value.owner.owner == entry.operation and ir.BlockArgument(value).arg_number not in found:
                found.append(ir.BlockArgument(value).arg_number)
        elif (value.owner.name in _STATES_SHARDING and "sharding" in value.owner.attributes
              and isinstance(value.type, ir.RankedTensorType)):
            shape = tuple(int(n) for n in ir.RankedTensorType(value.type).shape)
            sharding = sharding_axes(sdy.TensorShardingAttr(value.owner.attributes["sharding"]))
            stated.append(StatedCut(source_of_location(value.owner.location, ownership),
                                    sharding + [[]] * (len(shape) - len(sharding)), shape))
    return tuple(found), tuple(stated)
