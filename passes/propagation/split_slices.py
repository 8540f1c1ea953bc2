"""Collectives XLA adds where an op reads (or writes) one slice of a value along a dimension an argument's
split reaches: resharding, not a gradient's reduction, whatever shape its result has.

A loop that saves one time step a pass into a buffer, or reads one back (diffrax's saved trajectory, a
scan's slice of its input), indexes the buffer's time dimension. Where Shardy's propagation splits that
dimension (the observations the buffer is compared with have their time axis on a mesh axis: newbie16's
``ys_obs`` as ``P('data', 'model')``), the SPMD partitioner reads each device's own part, masks what lies
outside it and sums the parts with an all-reduce over the split's axes (or gathers the buffer first). The
sum's per-device shape can be a parameter's shard by chance (256 ensemble rows a device by a state of 64,
as an MLP weight's [512, 64] split in two), which collective_intent reads as a gradient's reduction.

Here such a collective is found by the op it comes from: a read JAX emitted (gather, dynamic_slice,
dynamic_update_slice, scatter) whose op_name ends the compiled collective's metadata (or its operand's,
where no matmul computes the operand), and whose indexed dimension Shardy's propagation splits on the
collective's axes. The argument it names is the nearest entry argument holding those axes on that
dimension among the values of the read operand's shape linked to it (elementwise ops, calls, loop carries,
either way: a saved buffer's split comes from what reads the loop's result), or else the one argument that
holds them on a dimension of that size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.breadth_first import breadth_first
from ..common.shapes import mlir_dtype_to_hlo
from ..common.sharding_text import pspec_text
from ..hlo.module import HloInstruction, HloModule
from ..models.errors import ShardyRejected
from ..models.report import Collective, TensorInfo
from ..stablehlo.module import functions, op_name_of_location, sharding_axes
from .shardy_reference import shardy_propagated, tagged_clone, walk_ops
from .split_activations import MAX_WALK, Walk

# The JAX primitives that read or write a slice at a computed offset: the last part of an op_name.
READS = frozenset({"gather", "dynamic_slice", "dynamic_update_slice", "scatter", "scatter-add"})
_STABLEHLO_READS = frozenset({"stablehlo.gather", "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice",
                              "stablehlo.scatter"})
_MATMULS = frozenset({"dot", "convolution"})
_INDEX_MAP = re.compile(r"(?:start_index_map|scatter_dims_to_operand_dims) = \[([\d, ]*)\]")


@dataclass(frozen=True)
class SplitSlice:
    """A read of one slice along ``dim`` of a value propagation splits there on ``axes``, and the argument that
    split reaches from (its index and dimension), where one does."""

    op_name: str
    primitive: str
    dtype: str
    shape: tuple[int, ...]
    dim: int
    axes: frozenset[str]
    argument: int | None
    argument_dim: int | None
    summed: bool = False  # a reduction sums the whole read's result over ``dim`` (no slice taken along it)


def primitive_of(op_name: str | None) -> str:
    return (op_name or "").rsplit("/", 1)[-1]


def _fused(hlo: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    comps = [hlo.computations.get(name) for _, name in ins.called()] if ins.opcode == "fusion" else []
    return [i for c in comps if c is not None for i in c.instructions]


def read_names(c: Collective, hlo: HloModule) -> frozenset[str]:
    """The op_names of the reads a collective's operand comes from, in the compiled HLO's metadata: the
    collective's own, its operand's (and what is fused into it), and, where no matmul computes the operand, the
    operand's own operands' (a sum over a loaded buffer: its parameter carries the read's name). None where a
    matmul computes it: a matmul's partial sums or a weight's gradient, which a read does not explain."""
    ins = hlo.instruction(c.hlo_name)
    if ins is None:
        return frozenset()
    names = [ins.op_name]
    for name in ins.operands:
        producer = hlo.instruction(name)
        if producer is None:
            continue
        inner = _fused(hlo, producer)
        if any(i.opcode in _MATMULS for i in (producer, *inner)):
            return frozenset()
        names += [producer.op_name, *(i.op_name for i in inner)]
        names += [o.op_name for o in map(hlo.instruction, producer.operands) if o is not None]
    return frozenset(n for n in names if n and primitive_of(n) in READS)


def _int_list(attr: ir.Attribute) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", str(attr).split(":", 1)[-1])]


def _shape(value: ir.Value[Any]) -> tuple[int, ...]:
    return tuple(int(n) for n in ir.RankedTensorType(value.type).shape) \
        if isinstance(value.type, ir.RankedTensorType) else ()


def _dtype(value: ir.Value[Any]) -> str:
    return mlir_dtype_to_hlo(str(ir.RankedTensorType(value.type).element_type)) \
        if isinstance(value.type, ir.RankedTensorType) else ""


def indexed_dims(op: Any) -> list[int]:
    """The dimensions of a read's operand it takes a slice of at a computed offset."""
    name, shape = op.operation.name, _shape(op.operands[0])
    if name == "stablehlo.dynamic_slice":
        sizes = _int_list(op.attributes["slice_sizes"])
        return [d for d, (n, k) in enumerate(zip(shape, sizes)) if k < n]
    if name == "stablehlo.dynamic_update_slice":
        update = _shape(op.operands[1])
        return [d for d, (n, k) in enumerate(zip(shape, update)) if k < n]
    numbers = "dimension_numbers" if name == "stablehlo.gather" else "scatter_dimension_numbers"
    found = _INDEX_MAP.search(str(op.attributes[numbers])) if numbers in op.attributes else None
    dims = [int(n) for n in found.group(1).replace(" ", "").split(",") if n] if found else []
    if name == "stablehlo.gather" and "slice_sizes" in op.attributes:
        sizes = _int_list(op.attributes["slice_sizes"])
        dims = [d for d in dims if d < len(sizes) and d < len(shape) and sizes[d] < shape[d]]
    return dims


def _names(axes: Iterable[str]) -> frozenset[str]:
    return frozenset(a.split(":")[0] for a in axes)


class _Linked(Walk):
    """The propagated module with the shardings of block arguments (a loop's carries, a function's
    arguments) and the values linked to a value in either direction."""

    def __init__(self, module: ir.Module, ownership: Any):
        super().__init__(module, ownership)
        self.returns = {ir.StringAttr(fn.attributes["sym_name"]).value: list(fn.regions[0].blocks[0].operations)[-1]
                        for fn in self.funcs.values()}

    def split(self, value: ir.Value[Any]) -> list[list[str]] | None:
        found = self.sharding(value)
        if found is not None or not isinstance(value.owner, ir.Block):
            return found
        number, parent = ir.BlockArgument(value).arg_number, value.owner.owner
        attr = None
        kind = parent.operation.name
        if kind == "stablehlo.while" and "sdy.sharding" in parent.attributes:
            shardings = list(sdy.TensorShardingPerValueAttr(parent.attributes["sdy.sharding"]).shardings)
            attr = shardings[number] if number < len(shardings) else None
        elif kind == "func.func" and "arg_attrs" in parent.attributes:
            args = list(ir.ArrayAttr(parent.attributes["arg_attrs"]))
            held = ir.DictAttr(args[number]) if number < len(args) else None
            attr = held["sdy.sharding"] if held is not None and "sdy.sharding" in held else None
        if attr is None:
            return None
        axes = sharding_axes(sdy.TensorShardingAttr(attr))
        return axes + [[] for _ in range(len(_shape(value)) - len(axes))]

    def consumers(self, value: ir.Value[Any]) -> list[ir.Value[Any]]:
        """The values ``value`` becomes: a same-shape result of its user, a callee's argument, a call's result
        for a function's return, a loop's carry and result."""
        out: list[ir.Value[Any]] = []
        shape = _shape(value)
        for use in value.uses:
            user, n = use.owner, use.operand_number
            name = user.operation.name
            parent: Any = user.parent
            if name == "func.call":
                fn = self.funcs.get(ir.FlatSymbolRefAttr(user.attributes["callee"]).value)
                args = fn.regions[0].blocks[0].arguments if fn is not None else []
                out += [args[n]] if n < len(args) else []
            elif name == "func.return":
                fn_name = ir.StringAttr(parent.attributes["sym_name"]).value
                out += [c.results[n] for c in self.callers.get(fn_name, []) if n < len(c.results)]
            elif name == "stablehlo.while":
                out += [user.results[n], user.regions[1].blocks[0].arguments[n]]
            elif name == "stablehlo.return" and parent is not None:
                if parent.operation.name == "stablehlo.while" and n < len(parent.results):
                    out += [parent.results[n], parent.regions[1].blocks[0].arguments[n]]
                elif parent.operation.name in ("stablehlo.case", "stablehlo.if") and n < len(parent.results):
                    out.append(parent.results[n])
            else:
                out += [r for r in user.results if _shape(r) == shape]
        return out

    def argument_holding(self, start: ir.Value[Any], dim: int, axes: frozenset[str],
                         arguments: list[list[list[str]]]) -> int | None:
        """The nearest entry argument holding ``axes`` on ``dim`` among the values linked to ``start`` that
        propagation keeps split there."""
        def kept_split(value: ir.Value[Any]) -> bool:
            split = self.split(value)
            return split is None or (dim < len(split) and axes <= _names(split[dim]))

        def linked(value: ir.Value[Any]) -> list[ir.Value[Any]]:
            return self.feeders(value) + self.consumers(value) if kept_split(value) else []

        for value in breadth_first([start], linked, MAX_WALK):
            if kept_split(value) and isinstance(value.owner, ir.Block) and value.owner.owner == self.entry.operation:
                k = ir.BlockArgument(value).arg_number
                if k < len(arguments) and dim < len(arguments[k]) and axes <= _names(arguments[k][dim]):
                    return k
        return None


def _by_size(size: int, axes: frozenset[str], inputs: tuple[TensorInfo, ...]) -> tuple[int, int] | None:
    """The one argument holding ``axes`` on a dimension of ``size`` (its index and dimension), or None."""
    held = [(t.index, d) for t in inputs for d, (n, on) in enumerate(zip(t.shape, t.sharding or []))
            if n == size and axes <= _names(on)]
    return held[0] if len(held) == 1 else None


def _summed_dims(op: Any) -> list[int]:
    """The dimensions a reduction sums a whole read's result over (a gather of full slices, its result shaped
    as its operand: diffrax's saved-time buffer summed over time in the backward pass of ``_save``)."""
    result = op.results[0]
    if _shape(result) != _shape(op.operands[0]):
        return []
    return [d for use in result.uses if use.owner.operation.name == "stablehlo.reduce"
            and "dimensions" in use.owner.attributes for d in _int_list(use.owner.attributes["dimensions"])]


def _longest_match(names: frozenset[str], ops: dict[str, list[Any]]) -> set[str]:
    """For each compiled op_name, the StableHLO op_name it ends with that is longest (``gather`` alone ends
    every gather's name: the read meant is the one whose name stack matches furthest)."""
    chosen = set()
    for n in names:
        matches = [o for o in ops if n == o or n.endswith("/" + o)]
        if matches:
            chosen.add(max(matches, key=len))
    return chosen


def split_slices(propagated: ir.Module, names: frozenset[str], inputs: tuple[TensorInfo, ...],
                 ownership: Any) -> list[SplitSlice]:
    """Each read in Shardy's propagation of the module whose op_name ends one of ``names`` (the compiled
    metadata's: the stack above the read's function is JAX's, not the function's) and whose indexed dimension
    (or one a reduction sums its whole result over) propagation splits, with the argument that split reaches
    from."""
    walk = _Linked(propagated, ownership)
    arguments = [t.sharding or [] for t in sorted(inputs, key=lambda t: t.index)]
    reads: dict[str, list[Any]] = {}
    for fn in functions(propagated).values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            if op.operation.name in _STABLEHLO_READS and op.operands and (name := op_name_of_location(op.location)):
                reads.setdefault(name, []).append(op)
    found: list[SplitSlice] = []
    for op_name in sorted(_longest_match(names, reads)):
        for op in reads[op_name]:
            operand = op.operands[0]
            split = walk.split(operand) or []
            sliced = indexed_dims(op)
            for d in sliced + [d for d in _summed_dims(op) if d not in sliced]:
                axes = _names(split[d]) if d < len(split) else frozenset()
                if not axes:
                    continue
                k = walk.argument_holding(operand, d, axes, arguments)
                k_dim = d if k is not None else None
                if k is None and (held := _by_size(_shape(operand)[d], axes, inputs)) is not None:
                    k, k_dim = held
                found.append(SplitSlice(op_name, primitive_of(op_name), _dtype(operand), _shape(operand), d, axes, k,
                                        k_dim, summed=d not in sliced))
    return found


_WHAT = {"gather": "gather reads", "dynamic_slice": "dynamic slice reads", "dynamic_update_slice":
         "dynamic update slice writes", "scatter": "scatter writes", "scatter-add": "scatter-add writes"}
_DOES = {"all-reduce": "sums the parts each device read, each masked to its own slice",
         "reduce-scatter": "sums the parts each device read, each masked to its own slice",
         "all-gather": "gathers the parts first"}
# The intent a split slice corrects: a gradient's reduction by its shape alone. A matmul's partial sums
# (activation: a vocab-parallel lookup's masked gather, a GPT-2's tied embedding) and the resharding already said
# so are left as collective_intent and collective_origin say them.
_RELABELLED = frozenset({"gradient-reduction"})


def split_slice_collectives(collectives: tuple[Collective, ...], hlo: HloModule, module: ir.Module,
                            inputs: tuple[TensorInfo, ...], ownership: Any) -> tuple[Collective, ...]:
    """The collectives, each one a read of a split slice explains (read as a gradient's reduction by its shape)
    marked ``reshard`` with a why naming the argument whose split the read meets (path and PartitionSpec).
    Shardy's propagation is run only where some such collective comes from a read no matmul feeds; a module
    Shardy refuses leaves them as they were."""
    wanted = {c.hlo_name: names for c in collectives if c.intent in _RELABELLED and c.mesh_axes
              and (names := read_names(c, hlo))}
    if not wanted:
        return collectives
    try:
        propagated = shardy_propagated(tagged_clone(module))
    except ShardyRejected:
        return collectives
    slices = split_slices(propagated, frozenset().union(*wanted.values()), inputs, ownership)
    by_index = {t.index: t for t in inputs}
    out = []
    for c in collectives:
        axes = _names(c.mesh_axes)
        matched = [s for s in slices if c.hlo_name in wanted and s.argument is not None and axes <= s.axes
                   and any(n == s.op_name or n.endswith("/" + s.op_name) for n in wanted[c.hlo_name])]
        if not matched:
            out.append(c)
            continue
        s = max(matched, key=lambda s: len(s.op_name))
        t = by_index[s.argument]  # type: ignore[index]
        on = ", ".join(sorted(s.axes))
        value = f"{s.dtype}{list(s.shape)}"
        what = (f"a sum over dimension {s.dim} of {value} (read whole by a {s.primitive})" if s.summed else
                f"the {_WHAT[s.primitive]} one slice of {value} along its dimension {s.dim}")
        does = ("adds the parts each device summed" if s.summed else
                _DOES.get(c.kind, "moves the parts between devices"))
        why = (f"{what}, which propagation splits on {on} from {t.path} {pspec_text(t.sharding)} (its dimension "
               f"{s.argument_dim}): each device holds only its part of that dimension, and the {c.kind} over "
               f"{', '.join(c.mesh_axes)} {does}; resharding that layout causes, not a gradient's sum")
        out.append(c.model_copy(update={"intent": "reshard", "why": why}))
    return tuple(out)
