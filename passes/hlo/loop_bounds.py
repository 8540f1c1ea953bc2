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


def loop_init(module: HloModule, loop: HloInstruction) -> HloInstruction | None:
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
    cond = module.computations.get(called.get("condition", ""))
    if cond is None:
        return None
    root = _op_of(module, next((i for i in cond.instructions if i.is_root), None))
    if root is None or root[0] != "compare" or len(root[2]) != 2:
        return None
    lhs, rhs = (_through_copies(module, o) for o in root[2])
    return _counted_runs(module, loop, root[1].get("direction", ""), lhs, rhs)


def loop_trip_bound(module: HloModule, loop: HloInstruction) -> int | None:
    """At most how many times a loop runs whose condition ANDs a counter test with others (diffrax's
    solver loops and ``eqx.internal.while_loop(max_steps=...)``: ``(t < t1) & (step < max_steps)``;
    a ``lax.while_loop`` whose predicate says ``& (k < 1000)``): the loop stops no later than the counter
    test alone would stop it, so that test's count, XLA's constant over the body's constant step, bounds
    it. The smallest of its conjuncts' counts; None where no conjunct is a plain counter test (a loop
    counting down from a value the program computes, a bound the program computes)."""
    called = dict(loop.called())
    cond = module.computations.get(called.get("condition", ""))
    root = next((i for i in cond.instructions if i.is_root), None) if cond is not None else None
    if root is None:
        return None
    counts = [n for direction, lhs, rhs in _conjuncts(module, root, {})
              if (n := _counted_runs(module, loop, direction, lhs, rhs)) is not None]
    return min(counts) if counts else None


def _resolved(module: HloModule, name: str, fused_params: dict[str, str]) -> HloInstruction | None:
    """The value an operand is, through copies and, inside a fusion, through its parameters to the fusion's
    operands in the condition."""
    ins = _through_copies(module, name)
    if ins is not None and ins.opcode == "parameter" and ins.name in fused_params:
        return _through_copies(module, fused_params[ins.name])
    return ins


def _conjuncts(module: HloModule, ins: HloInstruction, fused_params: dict[str, str],
               ) -> list[tuple[str, HloInstruction | None, HloInstruction | None]]:
    """The comparisons a condition ANDs together (through one fusion of them: ``compare_and_fusion`` on
    CPU), each as (direction, left, right) with its operands resolved to the condition's values."""
    if ins.opcode == "compare" and len(ins.operands) == 2:
        lhs, rhs = (_resolved(module, o, fused_params) for o in ins.operands)
        return [(ins.attrs.get("direction", ""), lhs, rhs)]
    if ins.opcode == "and":
        return [c for o in ins.operands if (x := _resolved(module, o, {})) is not None
                for c in _conjuncts(module, x, fused_params)]
    if ins.opcode == "fusion" and not fused_params:
        fused = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
        root = next((i for i in fused.instructions if i.is_root), None) if fused else None
        if root is None or fused is None:
            return []
        params = {i.name: ins.operands[int(i.operands[0])] for i in fused.instructions
                  if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()
                  and int(i.operands[0]) < len(ins.operands)}
        return _conjuncts(module, root, params)
    return []


def _counted_runs(module: HloModule, loop: HloInstruction, direction: str, lhs: HloInstruction | None,
                  rhs: HloInstruction | None) -> int | None:
    """How many times ``counter <direction> bound`` holds, the counter being a tuple element the loop starts at
    a constant and its body adds a constant step to; None unless all three are plain."""
    called = dict(loop.called())
    body = module.computations.get(called.get("body", ""))
    if body is None or not loop.operands:
        return None
    index, bound = _tuple_index(lhs), _int_constant(rhs)
    if index is None:  # constant on the left: read the comparison the other way round
        index, bound, direction = _tuple_index(rhs), _int_constant(lhs), _FLIPPED.get(direction, "")
    counted = _start_and_step(module, loop, index) if bound is not None else None
    if counted is None or bound is None:
        return None
    start, step = counted
    if direction == "LT":
        return max(0, -(-(bound - start) // step))
    if direction == "LE":
        return max(0, (bound - start) // step + 1)
    if direction == "NE" and bound >= start and (bound - start) % step == 0:  # else it never meets the bound
        return max(0, (bound - start) // step)
    return None


def _start_and_step(module: HloModule, loop: HloInstruction, index: int | None) -> tuple[int, int] | None:
    """Where a counter (a tuple element) starts and what the body adds each trip: constants, a positive step;
    None unless both are plain."""
    body = module.computations.get(dict(loop.called()).get("body", ""))
    init_tuple = loop_init(module, loop)
    body_root = next((i for i in body.instructions if i.is_root), None) if body is not None else None
    if index is None or init_tuple is None or init_tuple.opcode != "tuple" \
            or body_root is None or body_root.opcode != "tuple" or index >= len(init_tuple.operands) \
            or index >= len(body_root.operands):
        return None
    start = _int_constant(_through_copies(module, init_tuple.operands[index]))
    step_op = _op_of(module, _through_copies(module, body_root.operands[index]))
    if start is None or step_op is None or step_op[0] != "add" or len(step_op[2]) != 2:
        return None
    a, b = (_through_inner_loops(module, o) for o in step_op[2])
    step = _int_constant(b) if _tuple_index(a) == index else _int_constant(a) if _tuple_index(b) == index else None
    return None if not step or step < 0 else (start, step)


def _through_inner_loops(module: HloModule, name: str) -> HloInstruction | None:
    """A value through copies and through the loops inside a body that carry it unchanged: ott's outer
    Sinkhorn loop adds its step to the iteration its inner scan carried through (``iteration + 10``, read
    from the scan's result)."""
    ins = _through_copies(module, name)
    for _ in range(8):
        source = module.by_name.get(ins.operands[0]) if ins is not None and ins.opcode == "get-tuple-element" \
            else None
        if source is None or source.opcode != "while":
            return ins
        k = _tuple_index(ins)
        if k is None:
            return ins
        body = module.computations.get(dict(source.called()).get("body", ""))
        root = next((i for i in body.instructions if i.is_root), None) if body is not None else None
        init = loop_init(module, source)
        passed = _through_copies(module, root.operands[k]) if root is not None and root.opcode == "tuple" \
            and k is not None and k < len(root.operands) else None
        if passed is None or _tuple_index(passed) != k or init is None or init.opcode != "tuple" \
                or k >= len(init.operands):
            return ins
        ins = _through_copies(module, init.operands[k])
    return ins


def loop_counter(module: HloModule, loop: HloInstruction) -> tuple[int, int, int] | None:
    """(tuple index, start, step) of a loop's counter: XLA's ``known_induction_variable`` and
    ``known_init_step`` where it wrote them, else the element the condition compares with a constant that the
    loop starts at a constant and steps by one; None where neither is plain."""
    config = loop.backend_config()
    variable, init_step = config.get("known_induction_variable"), config.get("known_init_step")
    try:
        if isinstance(variable, dict) and isinstance(init_step, dict):
            return int(variable["tuple_index"]), int(init_step["init"]), int(init_step["step"])
    except (KeyError, ValueError, TypeError):
        pass
    cond = module.computations.get(dict(loop.called()).get("condition", ""))
    root = next((i for i in cond.instructions if i.is_root), None) if cond is not None else None
    for _, lhs, rhs in _conjuncts(module, root, {}) if root is not None else []:
        index = _tuple_index(lhs) if _tuple_index(lhs) is not None else _tuple_index(rhs)
        counted = _start_and_step(module, loop, index) if index is not None else None
        if counted is not None and index is not None:
            return index, *counted
    return None
