"""Where a device cuts its own part of a value at its offset in the mesh, told apart from a small operand
(a bias) cut to the device's part of a sharded activation.

XLA's partitioner slices a value a device holds whole at the device's offset (a ``dynamic-slice`` whose
start is read from ``partition-id``, on CPU through a table of offsets): there the value was whole and the
op reading it asked for a part. A column-parallel matmul's bias, replicated (Flax's ``nnx.Linear`` with a
Megatron layout of its kernel alone), is cut the same way, to the part of the output features this device
computes, and broadcast onto the matmul's result in the fusion that adds it: the activation itself arrives
split, and nothing of its size is cut. So a cut counts where the slice taken is as large as the op's
result; a smaller one (the bias, an offset read from the table) is an operand broadcast onto it.
"""

from __future__ import annotations

from math import prod

from ..common.shapes import parse_arrays
from .module import HloInstruction, HloModule

_SLICES = frozenset({"dynamic-slice"})
_FLATTENS = frozenset({"bitcast", "reshape"})


def _elements(shape: str) -> int | None:
    arrays = parse_arrays(shape)
    return prod(arrays[0].dims) if len(arrays) == 1 else None


def fusion_body(module: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    """The instructions of the computation a fusion calls (none for any other op)."""
    if ins.opcode != "fusion":
        return []
    comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    return list(comp.instructions) if comp is not None else []


def cuts_own_size(module: HloModule, ins: HloInstruction) -> bool:
    """Whether the op is, or its fusion holds, a dynamic slice as large as the op's result (a value taken
    apart to this device's part); a smaller one, broadcast after (a bias cut to the output features this
    device computes), is not."""
    if ins.opcode in _SLICES:
        return True
    out = _elements(ins.shape)
    return any(i.opcode in _SLICES and (out is None or (_elements(i.shape) or 0) >= out)
               for i in fusion_body(module, ins))


def reads_partition_id(module: HloModule, ins: HloInstruction) -> bool:
    """Whether an operand of the op is ``partition-id`` (CPU's partitioned ops read it so)."""
    return any((o := module.instruction(name)) is not None and o.opcode == "partition-id" for name in ins.operands)


def cut_at_device_offset(module: HloModule, ins: HloInstruction) -> bool:
    """Whether the op cuts a value of its own size at this device's offset: it reads ``partition-id`` and
    holds no dynamic slice (a mask, a select at the offset) or one as large as its result; a fusion that
    reads it only to cut a smaller operand (a bias) to the device's part is not such a cut."""
    if not reads_partition_id(module, ins):
        return False
    body = fusion_body(module, ins)
    return not any(i.opcode in _SLICES for i in body) or cuts_own_size(module, ins)


def sliced_parameters(body: list[HloInstruction]) -> set[int]:
    """A fusion's parameters (by number) that a dynamic slice in its body cuts (behind bitcasts): operands
    taken apart, never an activation carried element by element."""
    numbers = {i.name: int(i.operands[0]) for i in body
               if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()}
    cut: set[int] = set()
    for i in body:  # operands come before their users in the text
        if i.opcode in _FLATTENS and len(i.operands) == 1 and i.operands[0] in numbers:
            numbers[i.name] = numbers[i.operands[0]]
        elif i.opcode in _SLICES and i.operands and i.operands[0] in numbers:
            cut.add(numbers[i.operands[0]])
    return cut
