"""How many times a ``while`` loop XLA gave no ``known_trip_count`` runs, read from its condition, its
start tuple and its body: the exact count of a plainly counted loop (the TPU compiler leaves the
annotation out)."""

from __future__ import annotations

from .module import HloInstruction, HloModule

_SAME_VALUE = frozenset({"copy", "bitcast", "convert"})
_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}


def _through_copies(module: HloModule, name: str) -> HloInstruction | None:
    ins = module.by_name.get(name)
    while ins is not None and ins.opcode in _SAME_VALUE and ins.operands:
        ins = module.by_name.get(ins.operands[0])
    return ins


def _int_constant(ins: HloInstruction | None) -> int | None:
    if ins is None or ins.opcode != "constant" or len(ins.operands) != 1:
        return None
    try:
        return int(ins.operands[0])
    except ValueError:
        return None


def _tuple_index(ins: HloInstruction | None) -> int | None:
    if ins is None or ins.opcode != "get-tuple-element":
        return None
    try:
        return int(ins.attrs.get("index", ""))
    except ValueError:
        return None


def _op_of(module: HloModule, ins: HloInstruction | None) -> tuple[str, dict[str, str], tuple[str, ...]] | None:
    """(opcode, attributes, operands) of an instruction, looking through a fusion
    that wraps one op of its parameters and constants (``wrapped_compare`` on CPU,
    ``loop_compare_fusion`` with the bound inside on GPU)."""
    if ins is None:
        return None
    if ins.opcode != "fusion":
        return ins.opcode, ins.attrs, ins.operands
    fused = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    root = next((i for i in fused.instructions if i.is_root), None) if fused else None
    if root is None or fused is None:
        return None
    params = {i.name: int(i.operands[0]) for i in fused.instructions
              if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()}
    constants = {i.name for i in fused.instructions if i.opcode == "constant"}  # the GPU fuses the bound in
    if not all((o in params and params[o] < len(ins.operands)) or o in constants for o in root.operands):
        return None
    return root.opcode, root.attrs, tuple(ins.operands[params[o]] if o in params else o for o in root.operands)


def _loop_init(module: HloModule, loop: HloInstruction) -> HloInstruction | None:
    """The tuple a loop starts from. XLA 0.12's CPU compiler wraps a while loop in a computation of
    its own, called with ``call``: the loop's operand is then that computation's parameter, and the
    tuple is the call's operand."""
    init = _through_copies(module, loop.operands[0])
    if init is None or init.opcode != "parameter" or not init.operands or not init.operands[0].isdigit():
        return init
    index = int(init.operands[0])
    callers = [c for c in module.callers().get(module.computation_of(init.name) or "", []) if c.opcode == "call"]
    if len(callers) != 1 or index >= len(callers[0].operands):
        return init
    return _through_copies(module, callers[0].operands[index])


def inferred_trip_count(module: HloModule, loop: HloInstruction) -> int | None:
    """The trip count of a counted loop XLA did not annotate (the TPU compiler
    leaves ``known_trip_count`` out): the condition compares one tuple element with
    a constant, the loop starts it at a constant and the body adds a constant step.
    None unless all three are plain."""
    called = dict(loop.called())
    cond, body = module.computations.get(called.get("condition", "")), module.computations.get(called.get("body", ""))
    if cond is None or body is None or not loop.operands:
        return None
    root = _op_of(module, next((i for i in cond.instructions if i.is_root), None))
    if root is None or root[0] != "compare" or len(root[2]) != 2:
        return None
    direction = root[1].get("direction", "")
    lhs, rhs = (_through_copies(module, o) for o in root[2])
    index, bound = _tuple_index(lhs), _int_constant(rhs)
    if index is None:  # constant on the left: read the comparison the other way round
        index, bound, direction = _tuple_index(rhs), _int_constant(lhs), _FLIPPED.get(direction, "")
    init_tuple = _loop_init(module, loop)
    body_root = next((i for i in body.instructions if i.is_root), None)
    if index is None or bound is None or init_tuple is None or init_tuple.opcode != "tuple" \
            or body_root is None or body_root.opcode != "tuple" or index >= len(init_tuple.operands) \
            or index >= len(body_root.operands):
        return None
    start = _int_constant(_through_copies(module, init_tuple.operands[index]))
    step_op = _op_of(module, _through_copies(module, body_root.operands[index]))
    if start is None or step_op is None or step_op[0] != "add" or len(step_op[2]) != 2:
        return None
    a, b = (_through_copies(module, o) for o in step_op[2])
    step = _int_constant(b) if _tuple_index(a) == index else _int_constant(a) if _tuple_index(b) == index else None
    if not step or step < 0:
        return None
    if direction == "LT":
        return max(0, -(-(bound - start) // step))
    if direction == "LE":
        return max(0, (bound - start) // step + 1)
    if direction == "NE" and (bound - start) % step == 0:
        return max(0, (bound - start) // step)
    return None
