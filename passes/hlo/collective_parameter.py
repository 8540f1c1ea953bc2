"""Which parameter a collective belongs to, read in the compiled HLO: the input
it moves (its operand is that input), or the weight of the matmul it serves (the
matmul whose partial sums it adds, or the one its gathered result feeds).

A finding that says "the dimension it contracts is sharded" leaves the user to
find the weight among hundreds; this names it, with the dimensions that matmul
contracts, so a rule can give the concrete PartitionSpec to use instead.

Operand identity, never a shape that happens to match: the walk follows the
operands from the matmul through ops that keep a value's elements (layout ops,
one layer of a stack, a fusion's parameters, a loop's carried tuple) to an entry
parameter, as ``collective_origin.entry_parameter`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from math import prod

from ..common.device_groups import MeshInfo
from ..models.report import Collective, TensorInfo
from .collective_origin import reads_in
from .convolution_kernel import KERNEL_POSITION, convolution_contracting, named_convolution
from .device_slices import cut_at_device_offset
from .fused_matmuls import fusion_body, matmuls_in, outer_operand, summed_producer
from .module import HloInstruction, HloModule
from .value_origin import KEEPS_ORDER as _KEEPS_ORDER
from .value_origin import OriginIndex, device_slice_parameter, moved_parameter, moves_data_only, origin_index
from .value_origin import weight_parameter as _weight_parameter

# Ops a gathered value passes through on its way to the matmul that reads it.
_PASS_THROUGH = frozenset({"bitcast", "copy", "reshape", "transpose", "convert", "get-tuple-element",
                           "all-gather-done", "copy-start", "copy-done", "broadcast", "dynamic-slice", "slice"})
_MAX_VISITS = 64
_DIMS = re.compile(r"\d+")


class ParameterRole(str, Enum):
    """How the parameter relates to the collective."""

    operand = "operand"  # the collective moves this input itself (a gather of a parameter)
    partial_sums = "partial-sums"  # the collective adds partial sums of a matmul by this weight
    feeds = "feeds"  # the collective's result is multiplied by this weight
    read = "read"  # a gather or dynamic slice reads this input along a sharded dimension (``contracting``: those)
    # The collective gathers the output of a matmul by this weight, split on the gathered axes because the
    # weight's output dimensions are (``contracting``: the dimensions the matmul contracts).
    output = "output"
    # XLA emitted the collective for the convolution by this kernel (its name stack's: the halo a kernel
    # split on its window trades, a gather for its backward pass), reaching it through no operand.
    convolution = "convolution"


@dataclass(frozen=True)
class CollectiveParameter:
    index: int  # the entry parameter's number (TensorInfo.index)
    role: ParameterRole
    # The parameter's dimensions the matmul contracts, where its per-device shape is the
    # matmul operand's (no reshape or transpose in between); None where unknown.
    contracting: tuple[int, ...] | None = None


def _contracting(dot: HloInstruction, position: int) -> tuple[int, ...] | None:
    if dot.opcode == "convolution":
        return convolution_contracting(dot, position)
    if dot.opcode != "dot":
        return None
    attr = dot.attrs.get("lhs_contracting_dims" if position == 0 else "rhs_contracting_dims")
    return tuple(int(d) for d in _DIMS.findall(attr)) if attr is not None else None


def weight_of(module: HloModule, holder: HloInstruction, came_from: str | None, inputs: dict[int, TensorInfo],
               index: OriginIndex, role: ParameterRole, sizes: dict[str, int]) -> CollectiveParameter | None:
    """The operand of the matmul in ``holder`` (itself or its fusion's) that is an entry
    parameter, other than the value ``came_from``; the larger one when both are."""
    fusion = holder if holder.opcode == "fusion" else None
    found: list[tuple[int, CollectiveParameter]] = []
    for dot in matmuls_in(module, holder):
        for position, operand in enumerate(dot.operands[:2]):
            outer = outer_operand(module, fusion, operand)
            # A convolution's weight is its kernel: its input (an image argument) is no weight it serves.
            if outer == came_from or (dot.opcode == "convolution" and position != KERNEL_POSITION):
                continue
            k = _weight_parameter(module, outer, index)
            t = inputs.get(k) if k is not None else None
            contracting = _contracting(dot, position)
            cut = device_slice_parameter(module, outer, index, contracting) if (  # a replicated weight's own part
                t is None and role is ParameterRole.partial_sums and contracting) else None
            if cut is not None and cut[0] in inputs:
                found.append((inputs[cut[0]].bytes, CollectiveParameter(cut[0], role, cut[1])))
            if k is None or t is None:
                continue
            operand_ins = module.instruction(operand)
            dims = _dims_of(operand_ins.shape) if operand_ins is not None else None
            mapped = _weight_dims(t, local_dims(t, sizes), dims, contracting) if dims and contracting else None
            found.append((t.bytes, CollectiveParameter(k, role, mapped)))
    return max(found, key=lambda f: f[0])[1] if found else None


def _gathered_contracting(module: HloModule, gather: HloInstruction, t: TensorInfo,
                          users: dict[str, list[HloInstruction]]) -> tuple[int, ...] | None:
    """The parameter's dimensions that the matmul its whole gathered value feeds contracts: where the
    gather rebuilds the whole parameter (its global shape) and one matmul reads it; None otherwise."""
    if _dims_of(gather.shape) != tuple(t.shape):
        return None
    # Only through ops that keep the dimensions' order: a transposed operand's contracted dimension is
    # another of the parameter's (a square weight would not tell them apart).
    keeps_order = lambda user: user.opcode in _KEEPS_ORDER or (  # noqa: E731
        user.opcode == "fusion" and len(user.operands) == 1
        and {i.opcode for i in fusion_body(module, user)} <= _KEEPS_ORDER | {"parameter"})
    for current, user in _users_breadth_first(gather, users, keeps_order):
        fusion = user if user.opcode == "fusion" else None
        for dot in matmuls_in(module, user):
            for position, operand in enumerate(dot.operands[:2]):
                operand_ins = module.instruction(operand)
                dims = _dims_of(operand_ins.shape) if operand_ins is not None else None
                contracting = _contracting(dot, position)
                if outer_operand(module, fusion, operand) == current.name and dims and contracting:
                    return _weight_dims(t, tuple(t.shape), dims, contracting)
    return None


def _users_breadth_first(start: HloInstruction, users: dict[str, list[HloInstruction]],
                         through: Callable[[HloInstruction], bool]) -> Iterator[tuple[HloInstruction, HloInstruction]]:
    """(the instruction reached from, a user of it), breadth first from ``start``, each user once, going on
    through the users ``through`` accepts (after the caller has looked at them), within _MAX_VISITS."""
    todo, seen = [start], {start.name}
    while todo and len(seen) < _MAX_VISITS:
        current = todo.pop(0)
        for user in users.get(current.name, ()):
            if user.name in seen:
                continue
            seen.add(user.name)
            yield current, user
            if through(user):
                todo.append(user)


def _weight_dims(t: TensorInfo, local: tuple[int, ...], operand: tuple[int, ...],
                 contracting: tuple[int, ...]) -> tuple[int, ...] | None:
    """The parameter's dimensions that the matmul operand's ``contracting`` dimensions are: by position
    where the operand is the parameter's shard as it is, else by size where one dimension alone has it
    (XLA transposes or reshards a weight on its way to the matmul)."""
    if operand == local:
        return contracting
    out = []
    for d in contracting:
        if d >= len(operand):
            return None
        size = operand[d]
        matches = {k for k in range(len(t.shape)) if size in (t.shape[k], local[k])}
        if len(matches) != 1:
            return None
        out.append(matches.pop())
    return tuple(sorted(set(out)))


def _dims_of(shape: str) -> tuple[int, ...] | None:
    m = re.match(r"^\w+\[([\d,]*)\]", shape)
    return tuple(int(d) for d in m.group(1).split(",") if d) if m else None


def axis_size(label: str, sizes: dict[str, int]) -> int:
    """``x`` is the mesh axis's size; a sub-axis ``x:(2)4`` is 4."""
    m = re.fullmatch(r".+:\((\d+)\)(\d+)", label)
    return int(m.group(2)) if m else sizes.get(label, 1)


def local_dims(t: TensorInfo, sizes: dict[str, int]) -> tuple[int, ...]:
    """The input's per-device shape under its sharding."""
    dims = list(t.sharding or []) + [[]] * (len(t.shape) - len(t.sharding or []))
    out = []
    for n, axes in zip(t.shape, dims):
        parts = 1
        for a in axes:
            parts *= axis_size(a, sizes)
        out.append(-(-n // parts))
    return tuple(out)


def collective_parameter(module: HloModule, c: Collective, inputs: dict[int, TensorInfo], index: OriginIndex,
                         users: dict[str, list[HloInstruction]], sizes: dict[str, int],
                         ) -> CollectiveParameter | None:
    ins = module.instruction(c.hlo_name)
    if ins is None or not ins.operands:
        return None
    # The input itself, or one layer a scan's body slices out of a stacked input (through the copy and
    # bitcast that transpose it by layout, a fusion XLA wrapped the collective in, a loop that returns the
    # weight unchanged): an FSDP gather of a layer's weight, or a collective matmul's ring passing its shard,
    # moves that weight.
    k = moved_parameter(module, ins.operands[0], index)
    if k is not None and k in inputs:
        contracting = _gathered_contracting(module, ins, inputs[k], users) if c.kind == "all-gather" else None
        return CollectiveParameter(k, ParameterRole.operand, contracting)
    # A gather or dynamic slice that reads an input along its sharded dimensions: XLA sums the masked
    # partial reads (an all-reduce), and every device holds the whole result.
    for name in ins.operands:
        producer = module.instruction(name)
        for _, number, dims in (reads_in(module, producer, index) if producer is not None else ()):
            t = inputs.get(number)
            sharded = {d for d, axes in enumerate(t.sharding or []) if axes} if t is not None else set()
            if sharded & set(dims):
                return CollectiveParameter(number, ParameterRole.read, tuple(sorted(sharded & set(dims))))
    # The matmul whose partial sums an all-reduce adds.
    if c.kind in ("all-reduce", "reduce-scatter"):
        producer = module.instruction(ins.operands[0])
        for _ in range(4):
            if producer is None:
                break
            if matmuls_in(module, producer):
                return weight_of(module, producer, None, inputs, index, ParameterRole.partial_sums, sizes)
            # XLA may wrap the matmul's result in a fusion that only converts or re-lays it out (CPU rounds
            # an f32 dot's result through bf16 in one) before the all-reduce.
            if not producer.operands or (producer.opcode not in _PASS_THROUGH and not (
                    producer.opcode == "fusion" and len(producer.operands) == 1 and moves_data_only(module, producer))):
                break
            producer = module.instruction(producer.operands[0])
    # The convolution whose name stack the collective carries: its kernel, where no operand reaches it.
    found = _convolution_kernel(module, ins, inputs, index, sizes)
    if found is not None:
        return found
    # The matmul the collective's result feeds (forward pass first: a backward matmul by the
    # same weight names it too).
    passes_on = lambda user: not matmuls_in(module, user) and (  # noqa: E731
        user.opcode in _PASS_THROUGH or (user.opcode == "fusion" and len(user.operands) == 1))
    readers = [found for current, user in _users_breadth_first(ins, users, passes_on) if matmuls_in(module, user)
               for found in [weight_of(module, user, current.name, inputs, index, ParameterRole.feeds, sizes)]
               if found is not None]
    # A gathered value several weights read (a residual stream, read by the q, k and v projections) is not
    # one reader's to fix: giving any one of them the shards in place leaves the gather for the others. The
    # weight whose output it is, split on the gathered axes, is (Llama's o_proj sharded on its output
    # features, as if it were a column half).
    if c.kind == "all-gather" and len({r.index for r in readers}) > 1:
        made_by = producing_weight(module, ins, inputs, index, sizes, c.mesh_axes)
        if made_by is not None:
            return made_by
    return readers[0] if readers else None


# Ops a split value is not traced back through: another collective (it changed the layout itself), the
# program's inputs and loops.
_NOT_THROUGH = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                          "all-reduce-done", "all-gather-start", "parameter", "constant", "while", "call",
                          "conditional", "custom-call", "partition-id", "replica-id", "iota"})


def producing_weight(module: HloModule, ins: HloInstruction, inputs: dict[int, TensorInfo], index: OriginIndex,
                     sizes: dict[str, int], axes: list[str]) -> CollectiveParameter | None:
    """The weight of the nearest matmul whose output the gathered value is made of (back through the ops that
    compute on it elementwise: a residual add, a norm; never through another matmul), whose output dimensions
    are sharded on the gathered ``axes``: its output comes out split on them, and the gather rebuilds it."""
    names = {a.split(":")[0] for a in axes}
    todo, seen = list(ins.operands[:1]), set(ins.operands[:1])
    while todo and len(seen) < _MAX_VISITS:
        producer = module.instruction(todo.pop(0))
        if producer is None or producer.opcode in _NOT_THROUGH:
            continue
        fusion = producer if producer.opcode == "fusion" else None
        dots = matmuls_in(module, producer)
        for dot in dots:
            for position, operand in enumerate(dot.operands[:2]):
                k = _weight_parameter(module, outer_operand(module, fusion, operand), index)
                t = inputs.get(k) if k is not None else None
                operand_ins = module.instruction(operand)
                dims = _dims_of(operand_ins.shape) if operand_ins is not None else None
                contracting = _contracting(dot, position)
                if k is None or t is None or not dims or not contracting:
                    continue
                contracted = _weight_dims(t, local_dims(t, sizes), dims, contracting)
                split = {d for d, on in enumerate(t.sharding or []) if any(a.split(":")[0] in names for a in on)}
                if contracted is not None and split and not split & set(contracted):
                    return CollectiveParameter(k, ParameterRole.output, contracted)
        if dots:  # another matmul's output (attention's): what it multiplied is not this value's layout
            continue
        for name in producer.operands:
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return None


def _convolution_kernel(module: HloModule, ins: HloInstruction, inputs: dict[int, TensorInfo], index: OriginIndex,
                        sizes: dict[str, int]) -> CollectiveParameter | None:
    found = named_convolution(module, ins.op_name, index)
    k = _weight_parameter(module, found[1], index) if found is not None else None
    t = inputs.get(k) if k is not None else None
    if found is None or k is None or t is None:
        return None
    kernel = module.instruction(found[0].operands[KERNEL_POSITION])
    dims = _dims_of(kernel.shape) if kernel is not None else None
    contracting = convolution_contracting(found[0], KERNEL_POSITION)
    # The kernel as it is, or gathered whole: its dimensions by position (an HWIO kernel's height and width
    # are often the same size, which a match by size cannot tell apart).
    local = tuple(t.shape) if dims == tuple(t.shape) else local_dims(t, sizes)
    mapped = _weight_dims(t, local, dims, contracting) if dims and contracting else None
    return CollectiveParameter(k, ParameterRole.convolution, mapped)


def sliced_partial_sums(module: HloModule | None, collectives: tuple[Collective, ...]) -> frozenset[str]:
    """The forward all-reduces of a matmul's partial sums whose other operand each device cut from a value
    it holds whole (the op that makes it reads ``partition-id``: a slice at the device's own offset). The
    contracted dimension is split there because the weight alone is sharded on it: in a tensor-parallel
    pair (Megatron's row-parallel projection) that operand arrives split, as the column-parallel matmul
    before it produced it, and nothing slices it."""
    if module is None:
        return frozenset()
    index = origin_index(module)
    out = set()
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind != "all-reduce" or c.intent != "activation" or ins is None or not ins.operands:
            continue
        producer = summed_producer(module, ins)
        if producer is None or "transpose(" in (producer.op_name or ""):
            continue
        fusion = producer if producer.opcode == "fusion" else None
        for dot in matmuls_in(module, producer):
            outer = [module.instruction(outer_operand(module, fusion, o)) for o in dot.operands[:2]]
            weights = [o is not None and _weight_parameter(module, o.name, index) is not None for o in outer]
            if sum(weights) == 1 and any(_cut_per_device(module, o) for o, w in zip(outer, weights) if not w):
                out.add(c.hlo_name)
    return frozenset(out)


def _cut_per_device(module: HloModule, ins: HloInstruction | None) -> bool:
    """Whether the value is a slice at this device's own offset: made by an op (or a fusion) that reads
    ``partition-id``, behind layout ops."""
    for _ in range(4):
        if ins is None:
            return False
        # A bias cut to the device's part of a column-parallel output (nnx.Linear's, replicated) is no cut of
        # the activation: the slice is smaller than the value (hlo/device_slices.py).
        if cut_at_device_offset(module, ins):
            return True
        # An elementwise function of such a slice (a layer norm's scale of the residual each device cut its
        # part of): a fusion with an operand of its own element count that is one. A sliced bias is smaller.
        elements = _elements(ins.shape)
        if ins.opcode == "fusion" and any(
                (o := module.instruction(name)) is not None and _elements(o.shape) == elements
                and cut_at_device_offset(module, o) for name in ins.operands):
            return True
        if ins.opcode not in _KEEPS_ORDER | {"bitcast", "reshape"} or not ins.operands:
            return False
        ins = module.instruction(ins.operands[0])
    return False


def _elements(shape: str) -> int | None:
    dims = _dims_of(shape)
    return prod(dims) if dims is not None else None


def collective_parameters(module: HloModule | None, collectives: tuple[Collective, ...],
                          inputs: tuple[TensorInfo, ...], mesh: MeshInfo) -> dict[str, CollectiveParameter]:
    """HLO name -> the parameter of each collective, where the compiled program shows one."""
    if module is None or not inputs:
        return {}
    index, users = origin_index(module), module.users()
    by_number = {t.index: t for t in inputs}
    out: dict[str, CollectiveParameter] = {}
    for c in collectives:
        found = collective_parameter(module, c, by_number, index, users, dict(mesh.axes))
        if found is not None:
            out[c.hlo_name] = found
    return out
