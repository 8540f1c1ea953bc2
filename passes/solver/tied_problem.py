"""A ``ShardingProblem`` with classes of its groups and ops tied to one choice each: the
smaller problem with one group per class of groups and one op per class of ops, each
costing the sum of its members (the pair tables of its uses summed alike), so any of
its assignments, spread back over the members (``TiedProblem.expand``), costs the
same on the original problem. ``symmetry.py`` ties the groups and ops colour refinement
finds alike (exact for the LP relaxation), ``repeats.py`` unrolled layers found as
repeats in the ops' order (a restriction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .sharding_problem import Assignment, MemoryTerm, OpChoice, ShardingProblem, Use, ValueGroup


@dataclass(frozen=True)
class TiedProblem:
    problem: ShardingProblem
    group_class: tuple[int, ...]  # per original group, its group in `problem`
    op_class: tuple[int, ...]  # per original op, its op in `problem`
    periods: tuple[int, ...]  # the repeat lengths found, in ops

    def expand(self, a: Assignment) -> Assignment:
        return Assignment(tuple(a.groups[c] for c in self.group_class), tuple(a.ops[c] for c in self.op_class))

    def then(self, more: TiedProblem) -> TiedProblem:
        """This problem tied, then ``more`` ties of its tied problem: one tying of the original."""
        return TiedProblem(more.problem, tuple(more.group_class[c] for c in self.group_class),
                           tuple(more.op_class[c] for c in self.op_class), more.periods)


def tie_classes(problem: ShardingProblem, group_root: Sequence[int], op_root: Sequence[int],
                periods: tuple[int, ...] = ()) -> TiedProblem:
    """The problem with the groups of one root tied, and the ops of one root. The ops of a class must
    be the same choice (strategies, uses) and each use's groups of one class; classes are numbered in
    the order of their roots."""
    reps = sorted(set(group_root))
    index = {r: k for k, r in enumerate(reps)}
    group_class = tuple(index[r] for r in group_root)
    unary = [np.zeros(len(problem.groups[r].unary)) for r in reps]
    for g in problem.groups:
        unary[group_class[g.id]] += np.array(g.unary)
    groups = tuple(ValueGroup(k, problem.groups[r].tensors, problem.groups[r].shape, problem.groups[r].dtype,
                              problem.groups[r].candidates, tuple(float(x) for x in unary[k]),
                              problem.groups[r].pinned) for k, r in enumerate(reps))
    op_reps = sorted(set(op_root))
    op_index = {r: k for k, r in enumerate(op_reps)}
    op_class = tuple(op_index[r] for r in op_root)
    seconds = [np.zeros(len(problem.ops[r].seconds)) for r in op_reps]
    reduce = [np.zeros(len(problem.ops[r].seconds)) for r in op_reps]
    tables = [[np.zeros((len(u.shardings), len(problem.groups[u.group].candidates))) for u in problem.ops[r].uses]
              for r in op_reps]
    for i, op in enumerate(problem.ops):
        k = op_class[i]
        seconds[k] += np.array(op.seconds)
        reduce[k] += np.array(op.reduce_seconds)
        for t, u in zip(tables[k], op.uses):
            t += np.array(u.seconds)
    ops = []
    for k, r in enumerate(op_reps):
        o = problem.ops[r]
        uses = tuple(Use(group_class[u.group], u.is_result, u.wanted, u.shardings,
                         tuple(tuple(float(x) for x in row) for row in t)) for u, t in zip(o.uses, tables[k]))
        ops.append(OpChoice(o.step, o.op, o.strategies, tuple(float(x) for x in seconds[k]),
                            tuple(float(x) for x in reduce[k]), uses, o.repeats))
    memory = tuple(MemoryTerm(group_class[m.group], m.path, m.bytes) for m in problem.memory)
    ties = tuple(sorted({(min(group_class[a], group_class[b]), max(group_class[a], group_class[b]))
                         for a, b in problem.ties if group_class[a] != group_class[b]}))
    tied = ShardingProblem(problem.axis_sizes, problem.free_axes, groups, tuple(ops), memory, problem.budget_bytes,
                           ties, tuple(group_class[g] for g in problem.arguments),
                           tuple(group_class[g] for g in problem.results))
    return TiedProblem(tied, group_class, op_class, periods)
