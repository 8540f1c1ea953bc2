"""Which pass of a training step (forward or backward) an op belongs to, where XLA left it no op_name.

JAX names every op it emits for reverse-mode autodiff ``transpose(jvp(...))``. XLA's GPU compiler drops the
metadata of the reduce-scatters it makes from an all-reduce and a dynamic-slice (and of the bitcasts around
them): such a reduce-scatter says nothing of its pass, though the matmul whose partial sums it adds says it.
Its pass is that matmul's, read through the layout ops between them. And a lookup's gradient (a scatter-add of
the rows read) is a weight's gradient as a matmul's is.
"""

from __future__ import annotations

from .module import HloInstruction, HloModule

# Ops that keep their operand's values: the pass they run in is their operand's.
_LAYOUT = frozenset({"bitcast", "copy", "reshape", "transpose", "convert", "get-tuple-element"})
_DEPTH = 4


def pass_op_name(ins: HloInstruction, module: HloModule | None) -> str | None:
    """``ins``'s op_name or, where XLA left it none, that of the first named value it is a layout of (a
    reduce-scatter's operand, behind bitcasts); None where none is named."""
    for _ in range(_DEPTH):
        if ins.op_name is not None or module is None:
            return ins.op_name
        if ins.opcode not in _LAYOUT and not ins.opcode.startswith(("reduce-scatter", "all-reduce")) \
                or not ins.operands:
            return None
        nxt = module.instruction(ins.operands[0])
        if nxt is None:
            return None
        ins = nxt
    return ins.op_name


def is_lookup_gradient(ins: HloInstruction | None, module: HloModule) -> bool:
    """A scatter, or a fusion holding one, in the backward pass: a lookup's gradient (the rows read, each
    added back into a table's shape)."""
    if ins is None or "transpose(" not in (pass_op_name(ins, module) or ""):
        return False
    if ins.opcode == "scatter":
        return True
    comps = [module.computations.get(name) for _, name in ins.called()] if ins.opcode == "fusion" else []
    return any(c is not None and any(i.opcode == "scatter" for i in c.instructions) for c in comps)
