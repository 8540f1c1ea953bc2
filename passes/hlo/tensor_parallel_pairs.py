"""Megatron's row-parallel reductions, read in the compiled HLO: the all-reduce that closes a
column/row pair of matmuls sharded by intent.

A column-parallel matmul (its weight sharded on the dimension it produces) leaves each device a
slice of a wider activation; elementwise ops (an activation function) keep it sliced; the
row-parallel matmul after it (its weight sharded on the dimension it contracts, the same one)
multiplies the slices into partial sums of an output as wide as the pair's input, and the
all-reduce adds them. That sum is the design, not a layout mistake: no layout of the second
weight avoids it short of giving up the pair. A ratio of sizes cannot tell it apart from an
expanding projection (a row-parallel projection over a long sequence sums far more than its
weight's shard), so it is recognised by its structure, operand identity only:

- the all-reduce's operand is a matmul (behind layout ops) with one weight operand, an entry
  parameter, sharded;
- that matmul's other operand is an elementwise function of one or more other matmuls, each with
  one sharded weight operand (the column-parallel halves): an activation of one up projection, or a
  gated MLP's product of two (SwiGLU: silu of the gate projection times the up projection, LLaMA's
  MLP), never through a slice at the device's offset nor a value another collective reduced, and
  computed from nothing else but constants;
- or, attention's (LLaMA's self-attention: q, k and v projections column-parallel over the heads,
  o_proj row-parallel): a function of weightless matmuls (q k^T, probs v) and softmax's reductions
  over the column halves, through the reshapes and transposes that split and merge the heads, and
  what a real Llama puts between them: RoPE (the head dimension's halves sliced, negated and
  concatenated back, times cos and sin), the causal mask (a select on iotas: a fusion of no operands
  is a constant where it holds nothing that differs by device) and grouped-query attention's repeat
  of each k/v head (a broadcast). The head split is not tracked dimension by dimension: the program
  is XLA's partitioned one, where any op that needs another device's heads (a slice or concatenate
  across the split, a reduction over the heads) holds a collective or a slice at the device's
  offset, and the walk stops at both;
- the all-reduced output has as many elements as each column matmul's activation input: the pair
  returns to its input's width (a residual stream's), where an expanding projection (logits,
  an MLP's up projection) does not.

A matmul is any form XLA's GPU compiler gives one (gpu_matmuls): a cuBLAS call, a Triton gemm fusion
with the activation fused into its prologue, weights placed side by side for one matmul and sliced apart
after (gate and up, q, k and v), split-K's sum of the slices between the matmul and the all-reduce. A column
half's replicated bias (Flax's nnx.Linear beside a Megatron layout of its kernel) is cut to the device's part of
the output in the fusion that adds it: a slice smaller than the activation, not followed (device_slices).

In the backward pass each column-parallel matmul's input gradient contracts the dimension its forward output
was split on, and a sum adds the partial gradients (Megatron's backward all-reduce): told by its op_name
(``transpose(jvp(...))``) and its matmul by one weight sharded on the sum's axes (a weight's own gradient has
none), its reason said in ``why`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from ..common.shapes import parse_arrays
from ..common.sharding_text import pspec_text
from ..models.report import Collective, TensorInfo
from .device_slices import cuts_own_size, sliced_parameters
from .fused_matmuls import matmuls_in, outer_operand
from .gpu_matmuls import matmul_holder, matmul_operands, split_k_partials, tuple_element_parameters
from .module import HloInstruction, HloModule
from .pass_direction import pass_op_name
from .value_origin import KEEPS_ORDER, OriginIndex, moves_data_only, origin_index, weight_parameter

_LAYOUT = KEEPS_ORDER | {"bitcast", "reshape"}
# Single-input elementwise ops an activation passes through between the two halves.
_ELEMENTWISE = _LAYOUT | {"tanh", "logistic", "exponential", "negate", "abs", "sqrt", "rsqrt", "sine", "cosine"}
# Two-operand elementwise ops, as in a gated MLP's product of its two projections.
_BINARY = frozenset({"multiply", "add", "subtract", "divide", "maximum", "minimum"})
# Ops a fused activation never holds: a reduction, a collective, a matmul, the device's number. A slice at the
# device's offset only of an operand smaller than the activation (a replicated bias cut to the device's part of a
# column-parallel output, nnx.Linear's, its offset an operand): the cut operand is not followed (device_slices).
_NOT_ELEMENTWISE = frozenset({"partition-id", "reduce", "all-reduce", "all-gather", "dot", "convolution"})
_MAX_VALUES = 64
# Past a weightless matmul (attention's q k^T or probs v) softmax's reductions are followed too.
_NOT_IN_ATTENTION = frozenset({"partition-id", "dynamic-slice", "all-reduce", "all-gather", "reduce-scatter",
                               "all-to-all", "collective-permute"})
_GATHER_OPS = frozenset({"all-gather", "all-gather-start"})
_CONSTANT = frozenset({"constant", "iota"})
# Ops of several operands that pick or place elements without mixing positions: a mask's select (its
# predicate, then the two values), RoPE's halves concatenated back.
_SELECTS = frozenset({"select", "compare", "clamp", "concatenate"})
# Single-input ops that move whole slices along one dimension: RoPE's halves sliced, a mask's row slice.
_SLICES = frozenset({"slice", "reverse"})
# What a fusion of no operands may hold and be the same value on every device (never a partition-id).
_VARIES_BY_DEVICE = frozenset({"partition-id", "replica-id", "rng", "rng-bit-generator", "rng-get-and-update-state",
                               "custom-call", "infeed", "recv"})
_CONSTANT_DEPTH = 4
# A pair's sum: an all-reduce, or (GPU) a reduce-scatter that leaves each device its part of the sum.
_SUMS = frozenset({"all-reduce", "reduce-scatter"})


def _elements(ins: HloInstruction | None) -> int | None:
    arrays = parse_arrays(ins.shape) if ins is not None else []
    return prod(arrays[0].dims) if len(arrays) == 1 else None


def _weights_and_other(module: HloModule, holder: HloInstruction | None, inputs: dict[int, TensorInfo],
                       index: OriginIndex, axes: frozenset[str]) -> tuple[list[TensorInfo], str] | None:
    """The matmul's weight sharded over ``axes`` (a parameter: ``inputs`` holds the step's parameters; several
    where XLA placed weights side by side for one matmul, as GPU's horizontal fusion of gate and up) and its
    other operand. A batch sharded over other axes is no weight, though a loop's carry traces back to it."""
    sides = matmul_operands(module, holder) if holder is not None else None
    if sides is None:
        return None
    found = [[inputs.get(k) if (k := weight_parameter(module, o, index)) is not None else None for o in names]
             if layout_only else [None] for names, layout_only in sides]
    found = [[t if t is not None and axes & {a for dim in t.sharding or [] for a in dim} else None for t in side]
             for side in found]
    weighted = [all(t is not None for t in side) for side in found]
    if sum(weighted) != 1 or len(sides[1 - weighted.index(True)][0]) != 1:
        return None
    position = weighted.index(True)
    return [t for t in found[position] if t is not None], sides[1 - position][0][0]


def _is_constant(module: HloModule, ins: HloInstruction) -> bool:
    """A constant or an iota, or a broadcast of one (a scale XLA left unfused)."""
    while ins.opcode == "broadcast" and len(ins.operands) == 1:
        nxt = module.instruction(ins.operands[0])
        if nxt is None:
            return False
        ins = nxt
    return ins.opcode in _CONSTANT


def _is_constant_value(module: HloModule, name: str, depth: int = 0) -> bool:
    """A constant, a broadcast of one, or a fusion or an elementwise op of nothing but constants: XLA's
    wrapped broadcast, or a causal mask built from iotas in a fusion of no operands (a compare of two
    iotas, selected into a bias). ``depth`` bounds the look (each sum's walk stays a bounded number of steps)."""
    ins = module.instruction(name)
    if ins is None or depth > _CONSTANT_DEPTH:
        return False
    if ins.opcode == "fusion":
        comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
        return comp is not None and not any(i.opcode in _VARIES_BY_DEVICE for i in comp.instructions) and all(
            _is_constant_value(module, o, depth + 1) for o in ins.operands)
    if ins.opcode in _ELEMENTWISE | _BINARY | _SELECTS and ins.operands:
        return all(_is_constant_value(module, o, depth + 1) for o in ins.operands)
    return _is_constant(module, ins)


def _attention_operands(module: HloModule, ins: HloInstruction, index: OriginIndex) -> list[str] | None:
    """The non-constant operands of a weightless matmul (attention's q k^T or probs v: no operand is an entry
    parameter) or, in attention, of softmax's reductions and normalizations (a reduce, or a fusion holding
    one, but no slice at the device's offset nor a collective); None for anything else."""
    call = matmul_holder(module, ins)
    if call is not None and call.opcode == "custom-call":  # cuBLAS's: its lhs and rhs
        if any(weight_parameter(module, o, index) is not None for o in call.operands[:2]):
            return None
        return [o for o in call.operands[:2] if not _is_constant_value(module, o)] or None
    fusion = ins if ins.opcode == "fusion" else None
    dots = matmuls_in(module, ins)
    if dots:
        if len(dots) != 1 or any(weight_parameter(module, outer_operand(module, fusion, o), index) is not None
                                 for o in dots[0].operands[:2]):
            return None
    elif ins.opcode == "fusion":
        comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
        if comp is None or any(i.opcode in _NOT_IN_ATTENTION for i in comp.instructions):
            return None
    elif ins.opcode != "reduce":
        return None
    return [o for o in ins.operands if not _is_constant_value(module, o)] or None


def _elementwise_operands(module: HloModule, ins: HloInstruction, out: int | None = None) -> list[str] | None:
    """The operands an elementwise op (a layout or unary op, a binary one of same-sized values, or XLA's
    loop fusion of an activation and a gating product) carries on element by element, never through a
    slice at the device's offset or a reduction; None for any other op. A fusion's smaller operands (a
    scalar, a bias it broadcasts) are not followed; ``out``: the elements of the output followed (a
    multi-output fusion's one output), by default the op's own."""
    out = out if out is not None else _elements(ins)
    outputs = module.instruction(ins.operands[0]) if ins.opcode == "get-tuple-element" and ins.operands else None
    if outputs is not None and outputs.opcode == "fusion" and ins.attrs.get("index", "").isdigit():
        # one output of a multi-output loop fusion (GPU's): the operands that output is computed from
        reads = tuple_element_parameters(module, outputs, int(ins.attrs["index"]))
        found = _elementwise_operands(module, outputs, out) if reads is not None else None
        named = {outputs.operands[k] for k in reads if k < len(outputs.operands)} if reads is not None else set()
        return [o for o in found if o in named] if found is not None else None
    if ins.opcode in _ELEMENTWISE | _SLICES and len(ins.operands) == 1:
        return list(ins.operands)
    if ins.opcode in _BINARY | _SELECTS and len(ins.operands) >= 2:
        return [o for o in ins.operands if not _is_constant_value(module, o)]
    if ins.opcode != "fusion" or not ins.operands or matmuls_in(module, ins):
        return None
    comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    if comp is None or any(i.opcode in _NOT_ELEMENTWISE for i in comp.instructions) or cuts_own_size(module, ins):
        return None
    sliced, cut = _sliced_parameters(comp.instructions), sliced_parameters(list(comp.instructions))
    return [o for k, o in enumerate(ins.operands)
            if out is not None and k not in cut and (_elements(module.instruction(o)) == out or k in sliced)]


def _sliced_parameters(body: Sequence[HloInstruction]) -> set[int]:
    """The fusion parameters (by number) read only through static slices (behind bitcasts): a matmul's result
    that XLA's GPU compiler computed for weights placed side by side (gate and up, q, k and v), sliced apart
    again here. The body's instructions come in the text's order, operands first: one pass."""
    numbers = {i.name: int(i.operands[0]) for i in body
               if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()}
    sliced: set[int] = set()
    other: set[int] = set()
    for i in body:
        for o in i.operands:
            if o not in numbers:
                continue
            if i.opcode in ("bitcast", "reshape") and len(i.operands) == 1:
                numbers[i.name] = numbers[o]
            else:
                (sliced if i.opcode == "slice" else other).add(numbers[o])
    return sliced - other


def _column_halves(module: HloModule, name: str, inputs: dict[int, TensorInfo], index: OriginIndex,
                   axes: frozenset[str], gathers: dict[str, frozenset[str]], crossed: list[str],
                   attention: list[str]) -> list[tuple[TensorInfo, str]] | None:
    """The column-parallel matmuls the activation ``name`` is an elementwise function of (each one's
    weight and input): one (an activation function of an up projection) or several (SwiGLU's silu of the
    gate projection times the up projection). None where any value it is computed from, other than
    constants, is not such a matmul's result. An all-gather over other mesh axes than the pair's
    (``gathers``: each gather's axes) leaves the pair's split as it was: it is crossed, and named in
    ``crossed``. Attention's weightless matmuls between the halves are named in ``attention``."""
    halves: list[tuple[TensorInfo, str]] = []
    todo: list[tuple[str, bool]] = [(name, False)]  # (value, past attention's weightless matmul)
    seen: set[str] = set()
    while todo:
        current, in_attention = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        ins = module.instruction(current)
        if ins is None or len(seen) > _MAX_VALUES:
            return None
        holder = matmul_holder(module, ins)
        if holder is not None or matmuls_in(module, ins):
            half = _weights_and_other(module, holder, inputs, index, axes)
            if half is not None:
                halves.extend((weight, half[1]) for weight in half[0])
                continue
            scores = _attention_operands(module, ins, index)
            if scores is None:
                return None
            attention.append(current)
            todo.extend((o, True) for o in reversed(scores))
            continue
        if ins.opcode == "all-gather-done" and len(ins.operands) == 1:
            todo.append((ins.operands[0], in_attention))
            continue
        if ins.opcode in _GATHER_OPS and ins.operands and gathers.get(current) and not gathers[current] & axes:
            crossed.append(current)
            todo.append((ins.operands[0], in_attention))
            continue
        operands = _elementwise_operands(module, ins)
        if not operands and in_attention:
            operands = _attention_operands(module, ins, index)
        if not operands:
            return None
        todo.extend((o, in_attention) for o in reversed(operands))
    return halves or None


def _summed_matmul(module: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The matmul whose partial sums a sum adds (its form's holder: gpu_matmuls), through the layout ops (a
    convert XLA fused) and GPU's split-K between them; None where no matmul is reached."""
    producer = module.instruction(ins.operands[0])
    for _ in range(4):
        partials = split_k_partials(module, producer)  # GPU's split-K: the slices' products added first
        if partials is not None:
            producer = module.instruction(partials)
            continue
        if producer is None or matmul_holder(module, producer) is not None or matmuls_in(module, producer) \
                or not producer.operands or not (producer.opcode in _LAYOUT or (
                    producer.opcode == "fusion" and len(producer.operands) == 1
                    and moves_data_only(module, producer))):
            break
        producer = module.instruction(producer.operands[0])
    return matmul_holder(module, producer) if producer is not None else None


def row_parallel_sums(module: HloModule | None, collectives: tuple[Collective, ...],
                      params: tuple[TensorInfo, ...]) -> dict[str, str]:
    """HLO name -> why, for each forward all-reduce of partial sums that closes a column/row pair;
    ``params``: the step's parameters (collective_intent.parameters)."""
    if module is None or not params:
        return {}
    index = origin_index(module)
    by_number = {t.index: t for t in params}
    gathers = {c.hlo_name: frozenset(c.mesh_axes) for c in collectives if c.kind == "all-gather"}
    out: dict[str, str] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind not in _SUMS or c.intent != "activation" or ins is None or len(ins.operands) != 1 \
                or "transpose(" in (pass_op_name(ins, module) or ""):
            continue
        summed = _elements(module.instruction(ins.operands[0]))  # (a reduce-scatter's result is their part)
        axes = frozenset(c.mesh_axes)
        row = _weights_and_other(module, _summed_matmul(module, ins), by_number, index, axes)
        if row is not None and len(row[0]) != 1:  # the row-parallel half's one weight
            row = None
        crossed: list[str] = []
        attention: list[str] = []
        columns = _column_halves(module, row[1], by_number, index, axes, gathers, crossed, attention) \
            if row is not None else None
        if row is None or columns is None or summed is None or any(
                _elements(module.instruction(pair_input)) != summed for _, pair_input in columns):
            continue
        down = row[0][0]
        ups = sorted({t.path: t for t, _ in columns}.values(), key=lambda t: t.path)
        before = (f"the matmul before it by {ups[0].path} {pspec_text(ups[0].sharding)} produced sharded"
                  if len(ups) == 1 else
                  "the matmuls before it by " + " and ".join(f"{t.path} {pspec_text(t.sharding)}" for t in ups)
                  + (" produced sharded over the heads and attention combined head by head (softmax(q k^T) v)"
                     if attention else " produced sharded and an elementwise product combined (a gated MLP's, "
                     "SwiGLU's)"))
        if crossed:
            before += (" (" + ", ".join(sorted(set(crossed))) + " gathered it over "
                       + ", ".join(sorted({a for g in crossed for a in gathers[g]}))
                       + " on the way, another axis than the pair's, which leaves its split on "
                       + ", ".join(c.mesh_axes) + " as it was)")
        out[c.hlo_name] = (
            f"the row-parallel half of a tensor-parallel pair (Megatron's): {down.path} {pspec_text(down.sharding)} "
            f"is sharded on the dimension this matmul contracts, which {before}, and the sum returns the "
            f"activation to the pair's input width ({_width(module, c, ins)}): the designed "
            f"reduction, which no layout of {down.path} avoids short of giving up the pair")
    return out


def _width(module: HloModule, c: Collective, ins: HloInstruction) -> str:
    """The sum's shape; a reduce-scatter's is its operand's, of which each device keeps its part."""
    arrays = parse_arrays(operand.shape) if (operand := module.instruction(ins.operands[0])) is not None else []
    if c.kind != "reduce-scatter" or len(arrays) != 1:
        return f"{c.dtype}{c.shape}"
    return (f"{c.dtype}{list(arrays[0].dims)}, of which each device keeps its part along dimension "
            f"{ins.attrs.get('dimensions', '?').strip('{}')}, {c.dtype}{c.shape}: XLA's all-reduce split into a "
            f"reduce-scatter over {', '.join(c.mesh_axes)}")


def column_parallel_gradient_sums(module: HloModule | None, collectives: tuple[Collective, ...],
                                  params: tuple[TensorInfo, ...]) -> dict[str, str]:
    """HLO name -> why, for each backward sum of a column-parallel matmul's input gradient (Megatron's backward
    all-reduce): in the backward pass (op_name ``transpose(jvp(...))``, or its matmul's), the partial sums of a
    matmul by one weight sharded on the sum's axes, its other operand no weight (the output's gradient). The
    forward matmul by that weight produced its output split on those axes; the gradient of its input contracts
    the split dimension (a weight's own gradient multiplies two activations: no weight operand, so a sum that a
    shape test took for a gradient, its flattened shape some weight's shard's, is this one), and no layout of the
    weight that keeps its output split avoids the sum."""
    if module is None or not params:
        return {}
    index = origin_index(module)
    by_number = {t.index: t for t in params}
    out: dict[str, str] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind not in _SUMS or c.intent not in ("activation", "gradient-reduction") or ins is None \
                or len(ins.operands) != 1 or "transpose(" not in (pass_op_name(ins, module) or ""):
            continue
        axes = frozenset(c.mesh_axes)
        found = _weights_and_other(module, _summed_matmul(module, ins), by_number, index, axes)
        if found is None or len(found[0]) != 1:
            continue
        w = found[0][0]
        out[c.hlo_name] = (
            f"the backward pass of a column-parallel matmul (Megatron's backward all-reduce): {w.path} "
            f"{pspec_text(w.sharding)} produced its output split over {', '.join(c.mesh_axes)} in the forward pass, "
            f"so the gradient of that matmul's input ({_width(module, c, ins)}) contracts the split dimension: each "
            f"device holds partial sums and the {c.kind} adds them, the designed reduction of the backward pass, "
            f"which no layout of {w.path} that keeps its output split avoids")
    return out


def mark_row_parallel_sums(module: HloModule | None, collectives: tuple[Collective, ...],
                           params: tuple[TensorInfo, ...]) -> tuple[Collective, ...]:
    """The collectives, each sum of a tensor-parallel matmul with its reason in ``why``: a row-parallel pair's,
    and a column-parallel matmul's input gradient in the backward pass."""
    backward = column_parallel_gradient_sums(module, collectives, params)
    found = {**backward, **row_parallel_sums(module, collectives, params)}
    return tuple(c.model_copy(update={"why": found[c.hlo_name], "intent": "activation"})
                 if c.hlo_name in found and not c.why else c for c in collectives)
