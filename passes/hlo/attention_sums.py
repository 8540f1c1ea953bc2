"""The reductions an attention output projection's sum is computed after: what a sliced partial sum's input
was made of, past attention's weightless matmuls.

An attention block whose q, k and v kernels are sharded on the dimension they contract all-reduces their
outputs whole; attention then runs whole on every device, and the output projection, sharded (as Megatron
shards it) on the heads it contracts, slices its part of that whole output and all-reduces its own partial
sums. Its sum looks like the q, k and v kernels' mistake (each device slices a value it holds whole), but its
layout is the row-parallel half of the pair their fix makes: once they produce their heads split, its input
arrives split and its sum is the designed one. ``attention_inputs`` names, for each such sum, the
all-reduces whose results reach its matmul's input through a weightless matmul (q k^T, probs v), so a rule
can tell the consequence from the mistake; operand identity only.
"""

from __future__ import annotations

from ..models.report import Collective
from .fused_matmuls import matmuls_in, outer_operand, summed_producer
from .module import HloModule
from .value_origin import OriginIndex, origin_index, weight_parameter

_REDUCTIONS = frozenset({"all-reduce", "all-reduce-done", "reduce-scatter"})
# Ops a value is not traced back through: the program's inputs, loops, and the other collectives.
_STOP = frozenset({"parameter", "constant", "iota", "partition-id", "replica-id", "while", "call", "conditional",
                   "custom-call", "all-gather", "all-to-all", "collective-permute"})
_MAX_VALUES = 128


def attention_inputs(module: HloModule | None, collectives: tuple[Collective, ...]) -> dict[str, frozenset[str]]:
    """HLO name of each forward all-reduce of a matmul's partial sums -> the all-reduces its matmul's other
    operand (not its weight) is computed from past a weightless matmul; sums with none are left out."""
    if module is None:
        return {}
    index = origin_index(module)
    out: dict[str, frozenset[str]] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind != "all-reduce" or ins is None or not ins.operands or "transpose(" in (ins.op_name or ""):
            continue
        producer = summed_producer(module, ins)
        fusion = producer if producer is not None and producer.opcode == "fusion" else None
        dots = matmuls_in(module, producer) if producer is not None else []
        if len(dots) != 1:
            continue
        others = [o for o in (outer_operand(module, fusion, o) for o in dots[0].operands[:2])
                  if weight_parameter(module, o, index) is None]
        found = _reductions_past_attention(module, others, index)
        if found:
            out[c.hlo_name] = found
    return out


def _reductions_past_attention(module: HloModule, names: list[str], index: OriginIndex) -> frozenset[str]:
    """The all-reduces ``names`` are computed from, reached past at least one weightless matmul, back through
    any op but a matmul by a weight (another layer's projection), a collective of another kind or an input."""
    todo = [(n, False) for n in names]
    seen = set(names)
    found: set[str] = set()
    while todo and len(seen) < _MAX_VALUES:
        name, past = todo.pop(0)
        ins = module.instruction(name)
        if ins is None or ins.opcode in _STOP:
            continue
        if ins.opcode in _REDUCTIONS:
            if past:
                found.add(name)
            continue
        fusion = ins if ins.opcode == "fusion" else None
        dots = matmuls_in(module, ins)
        if dots:
            if any(weight_parameter(module, outer_operand(module, fusion, o), index) is not None
                   for d in dots for o in d.operands[:2]):
                continue
            past = True
        for o in ins.operands:
            if o not in seen:
                seen.add(o)
                todo.append((o, past))
    return frozenset(found)
