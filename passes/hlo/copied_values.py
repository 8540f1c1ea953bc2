"""What a buffer XLA added as a copy holds: the value it copies, followed through XLA's copies.

XLA's layout assignment copies a value into the layout its users read (an all-gather's result, gathered
column-major, copied row-major by a ``wrapped_copy`` fusion before a dot reads it). Such a copy has no JAX op
behind it, so no metadata and no source line, and it can be the largest buffer at the peak (a blackjax step's
gathered dataset, twice). Its source is the copied value's: the instruction's line, or the argument's path."""

from __future__ import annotations

from .module import HloInstruction, HloModule

# Copies of copies are followed this far (XLA chains a few at most).
_MAX_HOPS = 8
# A fusion that only copies: its parameter moved into another layout, reshaped in place on the way.
_COPY_BODY = frozenset({"parameter", "copy", "bitcast"})


def is_copy(hlo: HloModule, ins: HloInstruction) -> bool:
    """A ``copy``, or a fusion of one copy of its one parameter (XLA's ``wrapped_copy``)."""
    if ins.opcode == "copy":
        return len(ins.operands) == 1
    if ins.opcode != "fusion" or len(ins.operands) != 1:
        return False
    called = [hlo.computations.get(name) for _, name in ins.called()]
    if len(called) != 1 or called[0] is None:
        return False
    ops = [i.opcode for i in called[0].instructions]
    return "copy" in ops and set(ops) <= _COPY_BODY and ops.count("parameter") == 1


def copied_value(hlo: HloModule, ins: HloInstruction) -> HloInstruction | None:
    """The instruction whose value ``ins`` copies (through copies of it that have no metadata of their own: an
    argument's parameter, or the first with metadata or that is no copy); None where ``ins`` is no copy."""
    if not is_copy(hlo, ins):
        return None
    found = None
    for _ in range(_MAX_HOPS):
        operand = hlo.instruction(ins.operands[0])
        if operand is None:
            return found
        found = operand
        if operand.opcode == "parameter" or operand.metadata or not is_copy(hlo, operand):
            return operand
        ins = operand
    return found


# The collectives that move a value and leave it the same value (gathered, or its shards traded).
_MOVES = frozenset({"all-gather", "all-to-all", "collective-permute"})


def argument_behind(hlo: HloModule, ins: HloInstruction) -> str | None:
    """The argument (its path, the parameter's op name) that ``ins`` copies or moves, through copies and the
    collectives that move a value whole (jax 0.12's partitioner leaves an all-gather of an argument without
    metadata: the argument names what it gathered); None where something else is on the way."""
    for _ in range(_MAX_HOPS):
        if ins.opcode == "parameter":
            return ins.op_name if hlo.computation_of(ins.name) == hlo.entry else None
        if not (is_copy(hlo, ins) or ins.opcode in _MOVES) or len(ins.operands) != 1:
            return None
        operand = hlo.instruction(ins.operands[0])
        if operand is None:
            return None
        ins = operand
    return None
