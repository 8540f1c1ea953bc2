"""Where a buffer XLA fills from constants is used: its consumer, whose line is the buffer's.

XLA materialises a broadcast of a constant it could not fuse into its user as a fusion of its own (a
``wrapped_broadcast``: ott's Sinkhorn gradient fills a 512 MiB f32[4096,32768] with one scalar for the matmul
that reads it). Such a fusion has no JAX op behind it (its op_name is XLA's own, ``broadcast.30``) and no line,
and it can be a quarter of the peak. The line that asks for it is its consumer's: the first user, through
copies and the tuple that packs it for a loop (a loop's initial carry: the loop's line), that has a user line."""

from __future__ import annotations

from collections.abc import Callable

from .copied_values import is_copy
from .module import HloInstruction, HloModule

# A fill's users are followed this far through copies of it (XLA chains a few at most).
_MAX_HOPS = 8
# What a fusion that fills a buffer from constants holds: its parameters (each a constant operand), constants,
# and the broadcast (with the layout ops around it).
_FILL_BODY = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "copy"})


def is_constant_fill(hlo: HloModule, ins: HloInstruction) -> bool:
    """A broadcast of a constant, or a fusion of one whose operands are all constants (XLA's
    ``wrapped_broadcast``): a value no JAX op computes."""
    operands = [hlo.instruction(o) for o in ins.operands]
    if not all(o is not None and o.opcode == "constant" for o in operands):
        return False
    if ins.opcode == "broadcast":
        return True
    if ins.opcode != "fusion":
        return False
    called = [hlo.computations.get(name) for _, name in ins.called()]
    if len(called) != 1 or called[0] is None:
        return False
    ops = {i.opcode for i in called[0].instructions}
    return "broadcast" in ops and ops <= _FILL_BODY


def fill_consumer(hlo: HloModule, ins: HloInstruction,
                  has_line: Callable[[HloInstruction], bool]) -> HloInstruction | None:
    """The instruction that reads the constant fill ``ins``, through copies of it and the tuple that packs it
    (for a loop or a call): the first of its users ``has_line`` says has the user's line; None where ``ins`` is
    no fill or no user has one."""
    if not is_constant_fill(hlo, ins):
        return None
    users = hlo.users()
    frontier = [ins]
    for _ in range(_MAX_HOPS):
        following = []
        for value in frontier:
            for user in users.get(value.name, []):
                if has_line(user):
                    return user
                if is_copy(hlo, user) or user.opcode == "tuple":
                    following.append(user)
        if not following:
            return None
        frontier = following
    return None
