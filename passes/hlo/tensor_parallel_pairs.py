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
- that matmul's other operand comes, through single-input elementwise ops, from another matmul
  with one sharded weight operand (the column-parallel half), not from a slice at the device's
  offset nor from a value another collective reduced;
- the all-reduced output has as many elements as the first matmul's activation input: the pair
  returns to its input's width (a residual stream's), where an expanding projection (logits,
  an MLP's up projection) does not.
"""

from __future__ import annotations

from math import prod

from ..common.shapes import parse_arrays
from ..common.sharding_text import pspec_text
from ..models.report import Collective, TensorInfo
from .collective_origin import OriginIndex, origin_index
from .collective_parameter import _matmuls_in, _outer_operand
from .module import HloInstruction, HloModule
from .value_origin import KEEPS_ORDER, moves_data_only, weight_parameter

_LAYOUT = KEEPS_ORDER | {"bitcast", "reshape"}
# Single-input elementwise ops an activation passes through between the two halves.
_ELEMENTWISE = _LAYOUT | {"tanh", "logistic", "exponential", "negate", "abs", "sqrt", "rsqrt", "sine", "cosine"}
_MAX_STEPS = 8


def _elements(ins: HloInstruction | None) -> int | None:
    arrays = parse_arrays(ins.shape) if ins is not None else []
    return prod(arrays[0].dims) if len(arrays) == 1 else None


def _single_matmul(module: HloModule, holder: HloInstruction | None) -> HloInstruction | None:
    found = _matmuls_in(module, holder) if holder is not None else []
    return found[0] if len(found) == 1 else None


def _weight_and_other(module: HloModule, holder: HloInstruction, inputs: dict[int, TensorInfo],
                      index: OriginIndex, axes: frozenset[str]) -> tuple[TensorInfo, str] | None:
    """The matmul's one weight sharded over ``axes`` (a parameter: ``inputs`` holds the step's parameters)
    and its other operand (as the fusion's operand). A batch sharded over other axes is no weight, though
    a loop's carry traces back to it."""
    dot = _single_matmul(module, holder)
    if dot is None or len(dot.operands) < 2:
        return None
    fusion = holder if holder.opcode == "fusion" else None
    outer = [_outer_operand(module, fusion, o) for o in dot.operands[:2]]
    found = [inputs.get(k) if (k := weight_parameter(module, o, index)) is not None else None for o in outer]
    found = [t if t is not None and axes & {a for dim in t.sharding or [] for a in dim} else None for t in found]
    if sum(t is not None for t in found) != 1:
        return None
    position = 0 if found[0] is not None else 1
    weight = found[position]
    return (weight, outer[1 - position]) if weight is not None else None


def _carries_one_value(module: HloModule, ins: HloInstruction) -> bool:
    """An op that passes one value on, elementwise: a layout or unary op, or a fusion of one operand
    (XLA's loop fusion of an activation function), never a slice at the device's offset."""
    if ins.opcode in _ELEMENTWISE and len(ins.operands) == 1:
        return True
    if ins.opcode != "fusion" or len(ins.operands) != 1 or _matmuls_in(module, ins):
        return False
    comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    return comp is not None and not any(i.opcode in ("partition-id", "dynamic-slice", "reduce", "all-reduce")
                                        for i in comp.instructions)


def _column_half(module: HloModule, name: str, inputs: dict[int, TensorInfo], index: OriginIndex,
                 axes: frozenset[str]) -> tuple[TensorInfo, str] | None:
    """The column-parallel matmul the activation ``name`` comes from (its weight, its input), through
    single-input elementwise ops."""
    ins = module.instruction(name)
    for _ in range(_MAX_STEPS):
        if ins is None:
            return None
        if _matmuls_in(module, ins):
            return _weight_and_other(module, ins, inputs, index, axes)
        if not _carries_one_value(module, ins):
            return None
        ins = module.instruction(ins.operands[0])
    return None


def row_parallel_sums(module: HloModule | None, collectives: tuple[Collective, ...],
                      params: tuple[TensorInfo, ...]) -> dict[str, str]:
    """HLO name -> why, for each forward all-reduce of partial sums that closes a column/row pair;
    ``params``: the step's parameters (collective_intent.parameters)."""
    if module is None or not params:
        return {}
    index = origin_index(module)
    by_number = {t.index: t for t in params}
    out: dict[str, str] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind != "all-reduce" or c.intent != "activation" or ins is None or len(ins.operands) != 1 \
                or "transpose(" in (ins.op_name or ""):
            continue
        producer = module.instruction(ins.operands[0])
        for _ in range(4):  # through the layout ops (a convert XLA fused) between the matmul and its sum
            if producer is None or _matmuls_in(module, producer) or not producer.operands or not (
                    producer.opcode in _LAYOUT or (producer.opcode == "fusion" and len(producer.operands) == 1
                                                   and moves_data_only(module, producer))):
                break
            producer = module.instruction(producer.operands[0])
        axes = frozenset(c.mesh_axes)
        row = _weight_and_other(module, producer, by_number, index, axes) if producer is not None else None
        column = _column_half(module, row[1], by_number, index, axes) if row is not None else None
        if row is None or column is None:
            continue
        (down, _), (up, pair_input) = row, column
        if _elements(module.instruction(pair_input)) != prod(c.shape):
            continue
        out[c.hlo_name] = (
            f"the row-parallel half of a tensor-parallel pair (Megatron's): {down.path} {pspec_text(down.sharding)} "
            f"is sharded on the dimension this matmul contracts, which the matmul before it by {up.path} "
            f"{pspec_text(up.sharding)} produced sharded, and the sum returns the activation to the pair's input "
            f"width ({c.dtype}{c.shape}): the designed reduction, which no layout of {down.path} avoids short of "
            "giving up the pair")
    return out


def mark_row_parallel_sums(module: HloModule | None, collectives: tuple[Collective, ...],
                           params: tuple[TensorInfo, ...]) -> tuple[Collective, ...]:
    """The collectives, each row-parallel sum with its reason in ``why``."""
    found = row_parallel_sums(module, collectives, params)
    return tuple(c.model_copy(update={"why": found[c.hlo_name]}) if c.hlo_name in found and not c.why else c
                 for c in collectives)
