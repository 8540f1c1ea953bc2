"""The matmuls an op computes, seen from outside the fusion XLA may have put them in, and the op that made
the partial sums an all-reduce adds.

XLA fuses a dot or convolution with the ops around it; the passes that ask which weight a matmul multiplies
(collective_parameter, attention_sums, tensor_parallel_pairs) read the matmuls inside a fusion and name
their operands as the fusion's own operands, so the walk back to an entry parameter continues outside it.
Operand identity only.
"""

from __future__ import annotations

from .module import HloInstruction, HloModule
from .value_origin import KEEPS_ORDER

MATMUL = frozenset({"dot", "convolution"})
# Ops between a matmul and the all-reduce of its partial sums that only lay the sums out.
_LAYOUT = KEEPS_ORDER | {"bitcast", "reshape"}
# How many layout ops a sum is looked through for its matmul.
_MAX_LAYOUT_OPS = 4


def fusion_body(module: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    """The instructions of the computation a fusion calls; none for any other op."""
    comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    return list(comp.instructions) if comp else []


def matmuls_in(module: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    """The op itself when it is a matmul, or the matmuls inside its fusion."""
    if ins.opcode in MATMUL:
        return [ins]
    if ins.opcode == "fusion":
        return [i for i in fusion_body(module, ins) if i.opcode in MATMUL]
    return []


def outer_operand(module: HloModule, fusion: HloInstruction | None, name: str) -> str:
    """A fusion body's parameter as the fusion's operand (the name itself outside a fusion)."""
    ins = module.instruction(name)
    if fusion is None or ins is None or ins.opcode != "parameter" or not ins.operands:
        return name
    try:
        k = int(ins.operands[0])
    except ValueError:
        return name
    return fusion.operands[k] if k < len(fusion.operands) else name


def summed_producer(module: HloModule, reduction: HloInstruction) -> HloInstruction | None:
    """The op whose result a reduction (with at least one operand) sums: its operand, back through at most
    four layout ops to the first op that holds a matmul; where none does, the op the walk stopped at (None
    where the module lacks it)."""
    producer = module.instruction(reduction.operands[0])
    for _ in range(_MAX_LAYOUT_OPS):
        if producer is None or matmuls_in(module, producer) or producer.opcode not in _LAYOUT \
                or not producer.operands:
            break
        producer = module.instruction(producer.operands[0])
    return producer
