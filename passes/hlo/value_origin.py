"""Which entry parameter a value of the compiled HLO is, and which of its dimensions: through ops that keep
its elements (layout ops, converts, one layer of a stack, a fusion's parameters, a loop's carried tuple), by
operand identity, never a shape that happens to match. collective_origin.py and collective_parameter.py
ask it for a collective's operand, a matmul's weight and a read's table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from .module import HloInstruction, HloModule

# Ops that pass a value through with its elements (layout, type, one layer of a stack).
SAME_DATA = frozenset({"bitcast", "copy", "reshape", "transpose", "convert", "dynamic-slice", "slice",
                        "all-gather-done", "copy-done", "copy-start", "bitcast-convert", "slice-start", "slice-done"})
# Ops that keep a value's elements in their order (a weight on its way from its gather to a matmul).
KEEPS_ORDER = frozenset({"bitcast", "copy", "convert", "all-gather-done", "copy-start", "copy-done"})
_GATHERS = frozenset({"all-gather", "all-gather-done"})
# A collective matmul's ring: each step passes on the weight's shard the step before it received.
_RING = frozenset({"collective-permute-start", "collective-permute-done"})
# What a fusion that slices one layer out of a stack holds: the slice, its index arithmetic, layout ops.
_SLICING = frozenset({"parameter", "dynamic-slice", "bitcast", "reshape", "copy", "constant", "compare", "select",
                      "add", "subtract", "convert", "broadcast", "clamp", "tuple"})
MAX_STEPS = 64
DIMENSION_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class OriginIndex:
    computation_of: dict[str, str]
    loops_of_body: dict[str, list[HloInstruction]]
    fusions_of: dict[str, list[HloInstruction]]
    # A conditional's branch computation: the conditional and the operand its parameter is (lax.cond's
    # branches: ott's Sinkhorn computes its error in one, from the loop's carried inputs).
    branch_operand: dict[str, list[tuple[HloInstruction, int]]]


def origin_index(module: HloModule) -> OriginIndex:
    """Built once per module (intent's and origin's passes both ask for it)."""
    hit: OriginIndex | None = module.derived.get("origin_index")
    if hit is not None:
        return hit
    computation_of: dict[str, str] = {}
    loops: dict[str, list[HloInstruction]] = {}
    fusions: dict[str, list[HloInstruction]] = {}
    branches: dict[str, list[tuple[HloInstruction, int]]] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            computation_of[ins.name] = comp.name
            called = ins.called()
            for attr, callee in called:
                if ins.opcode == "while" and attr == "body":
                    loops.setdefault(callee, []).append(ins)
                elif ins.opcode == "fusion" and attr == "calls":
                    fusions.setdefault(callee, []).append(ins)
            if ins.opcode == "conditional":
                # Operand 0 selects; branch i's parameter is operand i + 1 (true: 1, false: 2).
                order = [c for a, c in called if a == "branch_computations"] or [
                    c for a in ("true_computation", "false_computation") for b, c in called if b == a]
                for i, callee in enumerate(order):
                    if i + 1 < len(ins.operands):
                        branches.setdefault(callee, []).append((ins, i + 1))
    hit = module.derived["origin_index"] = OriginIndex(computation_of, loops, fusions, branches)
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
    for _ in range(MAX_STEPS):
        if ins is None:
            return None
        if ins.opcode == "parameter":
            comp = index.computation_of.get(ins.name)
            k = _parameter_number(ins)
            if comp == module.entry:
                return (k, dims) if k is not None else None
            branch = index.branch_operand.get(comp or "", [])
            if len(branch) == 1 and k == 0:  # a conditional branch's parameter: the operand it is given
                ins = module.by_name.get(branch[0][0].operands[branch[0][1]])
                continue
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
            if source is not None and source.opcode == "while":
                # A loop's result that its body returns unchanged (a weight the forward scan carries, read
                # again by the backward one): the loop's own operand.
                ins = _passed_through(module, source, k)
                continue
            if source is None or source.opcode != "parameter":
                return None
            home = index.computation_of.get(source.name, "")
            loops = index.loops_of_body.get(home, [])
            branch = index.branch_operand.get(home, [])
            carried = (module.by_name.get(loops[0].operands[0]) if len(loops) == 1 and loops[0].operands else
                       module.by_name.get(branch[0][0].operands[branch[0][1]]) if len(branch) == 1 else None)
            if carried is None or carried.opcode != "tuple" or k >= len(carried.operands):
                return None
            ins = module.by_name.get(carried.operands[k])
        elif ins.opcode == "custom-call" and ins.attrs.get("custom_call_target") == '"ConcatBitcast"' and len(
                {entry_parameter(module, o, index) for o in ins.operands} - {None}) == 1:
            ins = module.by_name.get(ins.operands[0])  # one value's pieces (TPU slices it to move it) put back
        elif ins.opcode in SAME_DATA and ins.operands:
            dims = _operand_dims(module, ins, dims)
            ins = module.by_name.get(ins.operands[0])
        elif ins.opcode == "fusion" and len(ins.operands) == 1 and moves_data_only(module, ins):
            dims = _fused_operand_dims(module, ins, dims)
            ins = module.by_name.get(ins.operands[0])  # a copy or transpose XLA wrapped in a fusion
        else:
            return None
    return None


def _passed_through(module: HloModule, loop: HloInstruction, k: int) -> HloInstruction | None:
    """The element ``k`` of a while loop's initial tuple, where the body returns its element k unchanged
    (the root tuple's operand k is the body parameter's element k); None otherwise."""
    body = module.computations.get(next((c for a, c in loop.called() if a == "body"), ""))
    root = next((i for i in body.instructions if i.is_root), None) if body is not None else None
    element = module.by_name.get(root.operands[k]) if root is not None and root.opcode == "tuple" and k < len(
        root.operands) else None
    start = module.by_name.get(loop.operands[0]) if loop.operands else None
    if (element is None or element.opcode != "get-tuple-element" or element.attrs.get("index") != str(k)
            or start is None or start.opcode != "tuple" or k >= len(start.operands)):
        return None
    holder = module.by_name.get(element.operands[0]) if element.operands else None
    if body is None or holder is None or holder.opcode != "parameter" or holder not in body.instructions:
        return None
    return module.by_name.get(start.operands[k])


def weight_parameter(module: HloModule, name: str, index: OriginIndex) -> int | None:
    """The entry parameter a matmul's operand is: through ops that keep its elements (a loop's carried
    tuple too: ``entry_parameter``), one layer a fusion slices out of a stacked argument in a scan's body,
    and an all-gather of either behind the copies XLA wraps it in (a weight gathered FSDP-style)."""
    for _ in range(MAX_STEPS):
        k = _layer_parameter(module, name, index)
        ins = module.by_name.get(name)
        if k is not None or ins is None or not ins.operands:
            return k
        part = _combined_gather_part(module, ins) or _tuple_element(module, ins)
        if part is not None:
            name = part
            continue
        if not (ins.opcode in _GATHERS or ins.opcode in KEEPS_ORDER
                or (ins.opcode == "fusion" and len(ins.operands) == 1 and moves_data_only(module, ins))):
            return None
        name = ins.operands[0]
    return None


def _tuple_element(module: HloModule, ins: HloInstruction) -> str | None:
    """The value an element of a tuple made in the same computation is (behind an optimization barrier):
    JAX's rematerialization (``remat2``) passes a layer's gathered weights to the backward pass so."""
    number = ins.attrs.get("index", "")
    source = module.by_name.get(ins.operands[0]) if ins.opcode == "get-tuple-element" and number.isdigit() else None
    if source is not None and source.opcode == "opt-barrier" and len(source.operands) == 1:
        source = module.by_name.get(source.operands[0])
    if source is None or source.opcode != "tuple" or int(number) >= len(source.operands):
        return None
    return source.operands[int(number)]


def _combined_gather_part(module: HloModule, ins: HloInstruction) -> str | None:
    """The operand gathered into one element of a combined all-gather's tuple (XLA's combiner gathers several
    layers' weights in one, GPU's): the element's number is the operand's."""
    number = ins.attrs.get("index", "")
    source = module.by_name.get(ins.operands[0]) if ins.opcode == "get-tuple-element" and number.isdigit() else None
    if source is not None and source.opcode == "all-gather-done" and source.operands:
        source = module.by_name.get(source.operands[0])
    if source is None or source.opcode not in ("all-gather", "all-gather-start") or len(source.operands) < 2:
        return None
    return source.operands[int(number)] if int(number) < len(source.operands) else None


def _layer_parameter(module: HloModule, name: str, index: OriginIndex) -> int | None:
    """The entry parameter a gathered weight's shard is: itself, or one layer of a stacked argument that
    a fusion slices out (its data operand first, the layer's index after it)."""
    k = entry_parameter(module, name, index)
    ins = module.by_name.get(name)
    for _ in range(4):  # a fusion's parameter (a collective XLA fused, TPU's async start) is the fusion's operand
        callers = index.fusions_of.get(index.computation_of.get(name, ""), []) if ins is not None else []
        if k is not None or ins is None or ins.opcode != "parameter" or len(callers) != 1 or not ins.operands \
                or not ins.operands[0].isdigit() or int(ins.operands[0]) >= len(callers[0].operands):
            break
        name = callers[0].operands[int(ins.operands[0])]
        ins = module.by_name.get(name)
    if k is None and ins is not None and ins.opcode == "fusion-done" and ins.operands:
        ins = module.by_name.get(ins.operands[0])  # an async fusion (newer XLA's GPU): its start holds the body
    if k is not None or ins is None or ins.opcode not in ("fusion", "fusion-start") or not ins.operands:
        return k
    body = _fusion_opcodes(module, ins)
    return entry_parameter(module, ins.operands[0], index) if "dynamic-slice" in body and body <= _SLICING else None


def moved_parameter(module: HloModule, name: str, index: OriginIndex) -> int | None:
    """The input a collective's operand is, whole or one layer of a stack (``weight_parameter``), also where
    it is a step of a collective matmul's ring, which passes on the shard the step before it received."""
    for _ in range(MAX_STEPS):
        ring = module.by_name.get(name)
        if ring is None or ring.opcode not in _RING or not ring.operands:
            break
        name = ring.operands[0]
    return weight_parameter(module, name, index)


def _fusion_opcodes(module: HloModule, fusion: HloInstruction) -> set[str]:
    comp = module.computations.get(next((c for a, c in fusion.called() if a == "calls"), ""))
    return {i.opcode for i in comp.instructions} if comp is not None else set()


def _operand_dims(module: HloModule, ins: HloInstruction, dims: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """``dims`` of ``ins``'s result as its first operand's dimensions."""
    if not dims:
        return dims
    operand = module.by_name.get(ins.operands[0]) if ins.operands else None
    if ins.opcode == "transpose":  # result dimension i is the operand's dimension permutation[i]
        permutation = [int(d) for d in DIMENSION_NUMBERS.findall(ins.attrs.get("dimensions", ""))]
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
    for _ in range(MAX_STEPS):
        if ins is None or ins.opcode not in SAME_DATA or not ins.operands:
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
    return comp is not None and all(i.opcode in SAME_DATA or i.opcode in ("parameter", "tuple")
                                    for i in comp.instructions)


def device_slice_parameter(module: HloModule, name: str, index: OriginIndex, dims: tuple[int, ...],
                           ) -> tuple[int, tuple[int, ...]] | None:
    """(the entry parameter a fusion's result is each device's own part of, the result's ``dims`` as that
    parameter's, each known): a fusion that dynamic-slices its operand at an offset computed from ``partition-id`` (a
    replicated weight cut to the part of the contracted dimension its activation holds: BERT's tied decoder
    with the hidden states split on 'model'), through layout ops on either side; None otherwise."""
    fusion = module.by_name.get(name)
    if fusion is None or fusion.opcode != "fusion":
        return None
    comp = module.computations.get(next((c for a, c in fusion.called() if a == "calls"), ""))
    reads_id = any((o := module.by_name.get(n)) is not None and o.opcode == "partition-id" for n in fusion.operands)
    opcodes = {i.opcode for i in comp.instructions} if comp is not None else set()
    if comp is None or not (reads_id or "partition-id" in opcodes) or not opcodes <= _SLICING | {
            "multiply", "partition-id", "transpose"}:
        return None
    ins = next((i for i in comp.instructions if i.is_root), None)
    sliced, mapped = False, tuple[int | None, ...](dims)
    for _ in range(MAX_STEPS):
        if ins is None or ins.opcode not in SAME_DATA or not ins.operands:
            break
        sliced = sliced or ins.opcode == "dynamic-slice"
        mapped = _operand_dims(module, ins, mapped)
        ins = module.by_name.get(ins.operands[0])
    k = _parameter_number(ins) if ins is not None and ins.opcode == "parameter" else None
    found = parameter_dims(module, fusion.operands[k], index, mapped) if sliced and k is not None and k < len(
        fusion.operands) else None
    if found is None or not found[1] or None in found[1]:
        return None
    return found[0], tuple(sorted({d for d in found[1] if d is not None}))
