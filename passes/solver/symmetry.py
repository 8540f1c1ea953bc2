"""Groups and ops in the same place of the problem share one choice: the per-layer
q, k, v, o, wi and wo kernels of a stack of identical layers, their gradients and
optimizer state, and every intermediate the layers compute alike, found by colour
refinement and tied (``tied_problem.py``), so the program shrinks by about the
number of layers.

Colour refinement (1-dimensional Weisfeiler-Leman) starts from what makes two
choices the same: a group's shape, dtype, candidates, costs, pin and memory; an
op's kind, strategies and cost tables. Each round a group's colour adds the
multiset of (op colour, operand position) of its uses and of the colours of the
groups tied to it (state in and out), and an op's colour the colours of its
operands' groups, position by position, until no class splits. The stable
partition is equitable: every member of a class sees the same number of
neighbours of each class, in the same roles, at the same costs. Averaging any
solution of the LP relaxation over the classes then keeps it feasible (each
one-hot row, transportation row, tie and the budget row averages to itself) at the
same cost, so the tied LP's optimum is the untied LP's (Grohe, Kersting, Mladenov
and Selman, "Dimension Reduction via Colour Refinement", ESA 2014): its LP bound
bounds the untied problem, and the certified gap of the tied plan is against the
untied optimum. The integral optimum of the tied problem may lie above the
untied one (choices a symmetric problem must break: three values each wanting the
next on the other candidate), which that gap measures.

Where the layers differ (T5's first layer computes the relative position bias
the others reuse; the first layer's input is the embedding, the last's output
the loss), the differences reach the ops they touch and, round by round, their
neighbours; what stays alike is tied. A chain of identical layers with nothing
merging them (no residual stream shared by all) is told apart end to end, slowly:
past ``MAX_ROUNDS`` the partition is not used (an unstable one is a restriction,
not an equivalence), and the repeats in the ops' order (``repeats.py``) tie it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from .sharding_problem import ShardingProblem
from .tied_problem import TiedProblem, tie_classes

# Refinement rounds before giving up: T5 (2+2 layers) is stable after 10, an unrolled MLP stack after 5;
# each round is linear in the uses.
MAX_ROUNDS = 100


def _numbered(keys: Sequence[Hashable]) -> list[int]:
    """Equal keys one number, in the order they first appear (deterministic)."""
    ids: dict[Hashable, int] = {}
    return [ids.setdefault(k, len(ids)) for k in keys]


def symmetric_classes(problem: ShardingProblem) -> tuple[list[int], list[int]] | None:
    """(colour per group, colour per op) of the stable refinement; None where it is not stable within
    ``MAX_ROUNDS`` rounds."""
    memory: dict[int, list[tuple[int, ...]]] = {}
    for m in problem.memory:
        memory.setdefault(m.group, []).append(m.bytes)
    partners: dict[int, list[int]] = {}
    for a, b in problem.ties:
        partners.setdefault(a, []).append(b)
        partners.setdefault(b, []).append(a)
    users: dict[int, list[tuple[int, int]]] = {}
    for i, op in enumerate(problem.ops):
        for k, u in enumerate(op.uses):
            users.setdefault(u.group, []).append((i, k))
    group_colour = _numbered([(g.shape, g.dtype, g.candidates, g.unary, g.pinned, tuple(sorted(memory.get(g.id, ()))))
                              for g in problem.groups])
    op_colour = _numbered([(o.op, o.strategies, o.seconds, o.reduce_seconds, o.repeats,
                            tuple((u.is_result, u.wanted, u.shardings, u.seconds) for u in o.uses))
                           for o in problem.ops])
    classes = len(set(group_colour)) + len(set(op_colour))
    for _ in range(MAX_ROUNDS):
        ops = _numbered([(op_colour[i], tuple(group_colour[u.group] for u in o.uses))
                         for i, o in enumerate(problem.ops)])
        groups = _numbered([(group_colour[g], tuple(sorted((op_colour[i], k) for i, k in users.get(g, ()))),
                             tuple(sorted(group_colour[b] for b in partners.get(g, ()))))
                            for g in range(len(problem.groups))])
        op_colour, group_colour = ops, groups
        refined = len(set(group_colour)) + len(set(op_colour))
        if refined == classes:  # each colour keeps the last one in its key: no class split, none will
            return group_colour, op_colour
        classes = refined
    return None


def tie_symmetric(problem: ShardingProblem) -> TiedProblem | None:
    """The problem with its symmetric groups and ops tied; None when it has none (or the refinement did
    not settle)."""
    classes = symmetric_classes(problem)
    if classes is None:
        return None
    group_colour, op_colour = classes
    if len(set(group_colour)) == len(problem.groups) and len(set(op_colour)) == len(problem.ops):
        return None
    return tie_classes(problem, _first_member(group_colour), _first_member(op_colour))


def _first_member(colours: list[int]) -> list[int]:
    """Per element, the first element of its colour: the class's root."""
    first: dict[int, int] = {}
    return [first.setdefault(c, i) for i, c in enumerate(colours)]
