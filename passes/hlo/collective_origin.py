"""Where a collective's data comes from, read in the compiled HLO: which input
its operand is (operand identity, not a shape that happens to match), and why
a resharding collective runs at all.

The why names the op that reads along a sharded dimension and what XLA does
about it: the SPMD partitioner turns a gather whose operand is sharded along an
indexed dimension into a local gather from each device's shard, a mask, and an
all-reduce of the masked partial results (every device then holds the whole
gathered result); an all-gather of an input rebuilds it before an op that
reads along the sharded dimension.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import prod

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..models.report import Collective, TensorInfo, where_text
from ..source.frames import CodeOwnership
from .module import HloInstruction, HloModule

# How a finding names a source line: where_text, or the CLI's path-relative version.
Display = Callable[..., str]

# Ops that pass a value through with its elements (layout, type, one layer of a stack).
_SAME_DATA = frozenset({"bitcast", "copy", "reshape", "transpose", "convert", "dynamic-slice", "slice",
                        "all-gather-done", "copy-done", "copy-start", "bitcast-convert"})
_READS = frozenset({"gather", "dynamic-slice"})
_MAX_STEPS = 64
_DIMS = re.compile(r"\d+")


@dataclass(frozen=True)
class OriginIndex:
    computation_of: dict[str, str]
    loops_of_body: dict[str, list[HloInstruction]]
    fusions_of: dict[str, list[HloInstruction]]


def origin_index(module: HloModule) -> OriginIndex:
    """Built once per module (intent's and origin's passes both ask for it)."""
    hit: OriginIndex | None = module.derived.get("origin_index")
    if hit is not None:
        return hit
    computation_of: dict[str, str] = {}
    loops: dict[str, list[HloInstruction]] = {}
    fusions: dict[str, list[HloInstruction]] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            computation_of[ins.name] = comp.name
            for attr, callee in ins.called():
                if ins.opcode == "while" and attr == "body":
                    loops.setdefault(callee, []).append(ins)
                elif ins.opcode == "fusion" and attr == "calls":
                    fusions.setdefault(callee, []).append(ins)
    hit = module.derived["origin_index"] = OriginIndex(computation_of, loops, fusions)
    return hit


def _parameter_number(ins: HloInstruction) -> int | None:
    try:
        return int(ins.operands[0]) if ins.operands else None
    except ValueError:
        return None


def entry_parameter(module: HloModule, name: str, index: OriginIndex) -> int | None:
    """The entry parameter a value is, through ops that keep its elements, one
    layer of a stack, layout fusions' operands and a while loop's carried tuple."""
    found = parameter_dims(module, name, index, ())
    return found[0] if found is not None else None


def parameter_dims(module: HloModule, name: str, index: OriginIndex, dims: tuple[int | None, ...],
                   ) -> tuple[int, tuple[int | None, ...]] | None:
    """(the entry parameter a value is, as ``entry_parameter`` finds it; the value's ``dims`` as that
    parameter's dimensions): a transpose, or a copy and bitcast that transpose by layout, on the way
    makes the value's dimension i another of the parameter's; None for a dimension a reshape merges or
    splits."""
    ins = module.by_name.get(name)
    for _ in range(_MAX_STEPS):
        if ins is None:
            return None
        if ins.opcode == "parameter":
            comp = index.computation_of.get(ins.name)
            k = _parameter_number(ins)
            if comp == module.entry:
                return (k, dims) if k is not None else None
            callers = index.fusions_of.get(comp or "", [])
            if len(callers) != 1 or k is None or k >= len(callers[0].operands):
                return None
            ins = module.by_name.get(callers[0].operands[k])
        elif ins.opcode == "get-tuple-element":
            source = module.by_name.get(ins.operands[0]) if ins.operands else None
            try:
                k = int(ins.attrs.get("index", ""))
            except ValueError:
                return None
            if source is None or source.opcode != "parameter":
                return None
            loops = index.loops_of_body.get(index.computation_of.get(source.name, ""), [])
            carried = module.by_name.get(loops[0].operands[0]) if len(loops) == 1 and loops[0].operands else None
            if carried is None or carried.opcode != "tuple" or k >= len(carried.operands):
                return None
            ins = module.by_name.get(carried.operands[k])
        elif ins.opcode in _SAME_DATA and ins.operands:
            dims = _operand_dims(module, ins, dims)
            ins = module.by_name.get(ins.operands[0])
        elif ins.opcode == "fusion" and len(ins.operands) == 1 and moves_data_only(module, ins):
            dims = _fused_operand_dims(module, ins, dims)
            ins = module.by_name.get(ins.operands[0])  # a copy or transpose XLA wrapped in a fusion
        else:
            return None
    return None


def _operand_dims(module: HloModule, ins: HloInstruction, dims: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """``dims`` of ``ins``'s result as its first operand's dimensions."""
    if not dims:
        return dims
    operand = module.by_name.get(ins.operands[0]) if ins.operands else None
    if ins.opcode == "transpose":  # result dimension i is the operand's dimension permutation[i]
        permutation = [int(d) for d in _DIMS.findall(ins.attrs.get("dimensions", ""))]
        return tuple(permutation[d] if d is not None and d < len(permutation) else None for d in dims)
    if ins.opcode in ("reshape", "bitcast", "bitcast-convert") and operand is not None:
        after, before = _shape_and_order(ins.shape), _shape_and_order(operand.shape)
        if after is None or before is None:
            return tuple(None for _ in dims)
        if ins.opcode == "reshape":  # over the logical, row-major order
            after, before = (after[0], tuple(range(len(after[0])))), (before[0], tuple(range(len(before[0]))))
        return tuple(_same_dimension(after, before, d) if d is not None else None for d in dims)
    return dims  # copies, converts and slices keep every dimension where it is


def _fused_operand_dims(module: HloModule, fusion: HloInstruction,
                        dims: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """``dims`` of a data-moving fusion's result as its operand's: back from the body's root to its parameter."""
    comp = module.computations.get(next((c for a, c in fusion.called() if a == "calls"), ""))
    ins = next((i for i in comp.instructions if i.is_root), None) if comp is not None else None
    for _ in range(_MAX_STEPS):
        if ins is None or ins.opcode not in _SAME_DATA or not ins.operands:
            break
        dims = _operand_dims(module, ins, dims)
        ins = module.by_name.get(ins.operands[0])
    return dims if ins is not None and ins.opcode == "parameter" else tuple(None for _ in dims)


_SHAPE = re.compile(r"^\w+\[([\d,]*)\](?:\{([\d,]*))?")


def _shape_and_order(shape: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(an array's dimensions, their order in memory, major first: its layout's minor_to_major reversed)."""
    m = _SHAPE.match(shape)
    if m is None:
        return None
    sizes = tuple(int(d) for d in m.group(1).split(",") if d)
    minor_to_major = tuple(int(d) for d in m.group(2).split(",") if d) if m.group(2) else ()
    order = tuple(reversed(minor_to_major)) if len(minor_to_major) == len(sizes) else tuple(range(len(sizes)))
    return sizes, order


def _same_dimension(after: tuple[tuple[int, ...], tuple[int, ...]], before: tuple[tuple[int, ...], tuple[int, ...]],
                    d: int) -> int | None:
    """The dimension of ``before`` that ``after``'s dimension d is, when the elements are the same in the
    given orders (a reshape in logical order, a bitcast in memory order): the one of d's size with as many
    elements in front of it; None where d merges or splits dimensions."""
    (after_sizes, after_order), (before_sizes, before_order) = after, before
    if d >= len(after_sizes) or after_sizes[d] == 1:
        return None
    position = after_order.index(d)
    in_front = prod(after_sizes[k] for k in after_order[:position])
    for p, k in enumerate(before_order):
        if before_sizes[k] == after_sizes[d] and prod(before_sizes[j] for j in before_order[:p]) == in_front:
            return k
    return None


def moves_data_only(module: HloModule, fusion: HloInstruction) -> bool:
    """Whether a fusion only moves or converts its operands' elements (a copy, transpose or convert XLA
    wrapped in a fusion)."""
    comp = module.computations.get(next((c for a, c in fusion.called() if a == "calls"), ""))
    return comp is not None and all(i.opcode in _SAME_DATA or i.opcode in ("parameter", "tuple")
                                    for i in comp.instructions)


def _sharded_dims(t: TensorInfo) -> dict[int, list[str]]:
    return {d: axes for d, axes in enumerate(t.sharding or []) if axes}


def reads_in(module: HloModule, producer: HloInstruction, index: OriginIndex,
              ) -> list[tuple[HloInstruction, int, tuple[int, ...]]]:
    """(read op, input number, dims it indexes, numbered as the input's) for the gathers and
    dynamic slices that produce a value: the op itself, or inside the fusion that computes it.
    A dimension a reshape merges or splits on the way from the input is left out."""
    found: list[tuple[HloInstruction, int, tuple[int, ...]]] = []
    if producer.opcode in _READS:
        candidates = [(producer, producer.operands[0] if producer.operands else None)]
    elif producer.opcode == "fusion":
        comp = module.computations.get(next((c for a, c in producer.called() if a == "calls"), ""))
        candidates = [(i, i.operands[0] if i.operands else None) for i in (comp.instructions if comp else ())
                      if i.opcode in _READS]
    else:
        candidates = []
    for op, operand in candidates:
        if operand is None:
            continue
        if op.opcode == "gather":
            dims = tuple(int(d) for d in _DIMS.findall(op.attrs.get("start_index_map", "")))
        else:  # dynamic-slice: the dimensions whose start is not a constant
            dims = tuple(d for d, start in enumerate(op.operands[1:])
                         if (s := module.by_name.get(start)) is None or s.opcode != "constant")
        walked = parameter_dims(module, operand, index, dims)
        if walked is None:
            continue
        # The input's own dimensions: the read's operand may be a transposed copy of it.
        found.append((op, walked[0], tuple(d for d in walked[1] if d is not None)))
    return found


def collective_origin(module: HloModule, c: Collective, inputs: tuple[TensorInfo, ...], ownership: CodeOwnership,
                      index: OriginIndex | None = None, display: Display = where_text) -> tuple[str | None, str | None]:
    """(the path of the input the collective's operand is; why the collective runs),
    each None when the compiled program does not say."""
    index = index or origin_index(module)
    ins = module.by_name.get(c.hlo_name)
    if ins is None or not ins.operands:
        return None, None
    by_number = {t.index: t for t in inputs}
    k = entry_parameter(module, ins.operands[0], index)
    owner = by_number.get(k) if k is not None else None
    whole = f"{c.dtype}{list(c.shape)} ({format_bytes(c.bytes)})"
    if c.kind == "all-gather" and owner is not None and _sharded_dims(owner):
        return owner.path, (f"XLA all-gathers the whole of {owner.path} {pspec_text(owner.sharding)} over "
                            f"{', '.join(c.mesh_axes)} onto every device: {whole} per device")
    for name in ins.operands:
        producer = module.by_name.get(name)
        if producer is None:
            continue
        for op, number, dims in reads_in(module, producer, index):
            t = by_number.get(number)
            if t is None:
                continue
            sharded = {d: axes for d, axes in _sharded_dims(t).items() if d in dims}
            if not sharded:
                continue
            d, axes = next(iter(sorted(sharded.items())))
            src, via = module.attribution_of(op, ownership)
            at = f" at {display(src, via)}" if src or via else ""
            kind = "gather" if op.opcode == "gather" else "dynamic slice"
            return owner.path if owner else None, (
                f"the {kind}{at} reads {t.path} {pspec_text(t.sharding)} along dimension {d}, which is sharded "
                f"on {', '.join(axes)}: each device reads only its own shard, and the {c.kind} over "
                f"{', '.join(c.mesh_axes)} {_combines(c.kind)}, so every device holds the whole {whole}")
    return (owner.path if owner else None), None


def _combines(kind: str) -> str:
    """What a collective does with the devices' parts: only a reduction sums them."""
    if kind in ("all-reduce", "reduce-scatter"):
        return "sums the masked partial results"
    if kind == "all-gather":
        return "concatenates what each device read"
    return "moves the shards between devices"


def collective_origins(module: HloModule, collectives: Iterable[Collective], inputs: tuple[TensorInfo, ...],
                       ownership: CodeOwnership, display: Display = where_text) -> tuple[Collective, ...]:
    """Every collective with its ``input_path`` and ``why`` filled in where known;
    ``display`` writes a (source, via) pair as text."""
    index = origin_index(module)
    out = []
    for c in collectives:
        path, why = collective_origin(module, c, inputs, ownership, index, display)
        out.append(c.model_copy(update={"input_path": path, "why": why}) if path or why else c)
    return tuple(out)


def _callers_of_roots(module: HloModule) -> dict[str, list[HloInstruction]]:
    """A loop's, call's or branch's root, to the op that runs it: that op's
    result depends on the root, though the root is not its operand."""
    out: dict[str, list[HloInstruction]] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.opcode in ("while", "call", "conditional", "async-start"):
                for _, callee in ins.called():
                    callee_comp = module.computations.get(callee)
                    root = next((i for i in callee_comp.instructions if i.is_root), None) if callee_comp else None
                    if root is not None:
                        out.setdefault(root.name, []).append(ins)
    return out


def outputs_depending_on(module: HloModule, names: list[str]) -> dict[int, list[str]]:
    """For each entry output, the collectives among ``names`` it depends on (a
    walk forward from each collective over its users: linear in the program per
    collective, and few collectives have a why)."""
    entry = module.entry_computation
    root = next((i for i in entry.instructions if i.is_root), None)
    if root is None or not names:
        return {}
    outputs = list(root.operands) if root.opcode == "tuple" else [root.name]
    users, callers = module.users(), _callers_of_roots(module)
    found: dict[int, list[str]] = {}
    for name in names:
        seen, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for user in (*users.get(current, ()), *callers.get(current, ())):
                if user.name not in seen:
                    seen.add(user.name)
                    todo.append(user.name)
        for k, out in enumerate(outputs):
            if out in seen or (root.opcode != "tuple" and root.name in seen):
                found.setdefault(k, []).append(name)
    return found


def outputs_returning(module: HloModule, names: Iterable[str]) -> dict[int, list[str]]:
    """For each entry output, the collectives among ``names`` whose result it is, moved only by copies,
    bitcasts and transposes (XLA's wrapped copies) on the way to the ROOT tuple: the collectives that
    put an output on its returned layout, whatever source line their metadata carries."""
    wanted = set(names)
    entry = module.entry_computation
    root = next((i for i in entry.instructions if i.is_root), None)
    if root is None or not wanted:
        return {}
    outputs = list(root.operands) if root.opcode == "tuple" else [root.name]
    found: dict[int, list[str]] = {}
    for k, out in enumerate(outputs):
        ins = module.by_name.get(out)
        for _ in range(_MAX_STEPS):
            if ins is None:
                break
            if ins.name in wanted:
                found.setdefault(k, []).append(ins.name)
                break
            if ins.opcode in _SAME_DATA and ins.operands:
                ins = module.by_name.get(ins.operands[0])
            elif ins.opcode == "fusion" and len(ins.operands) == 1 and moves_data_only(module, ins):
                ins = module.by_name.get(ins.operands[0])
            else:
                break
    return found
