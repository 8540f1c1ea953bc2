"""Solving a ``ShardingProblem``: an integer linear program through HiGHS
(``scipy.optimize.milp``), or, above a size limit, a local search.

The ILP has a binary per group candidate and per op strategy, one-hot per group
and per op, and per use the transportation polytope between the strategies'
wanted shardings and the group's candidates (continuous pair variables whose row
sums are the strategies wanting that sharding and whose column sums are the
candidates): with integral choices the pairs are the one chosen pair, so their
cost is the reshard actually paid; relaxed, it is the local polytope whose LP
bound HiGHS reports. Uses whose group has one candidate, or whose op has one
strategy, are folded into the other side's cost and add no variables.

The local search (``local_search.py``) is iterated conditional modes from a few
forward starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .local_search import NoFeasibleSharding, local_search
from .sharding_problem import FORBIDDEN, Assignment, ShardingProblem, evaluate

__all__ = ["MAX_ILP_VARIABLES", "NoFeasibleSharding", "Solution", "local_search", "solve"]

# Pair, candidate and strategy variables above which `auto` uses the local search.
MAX_ILP_VARIABLES = 300_000
TIME_SCALE = 1e6  # seconds -> microseconds: HiGHS's tolerances are absolute
MEMORY_SCALE = 2.0 ** -20  # bytes -> MiB


@dataclass(frozen=True)
class Solution:
    assignment: Assignment
    seconds: float
    memory_bytes: int
    lower_bound: float | None  # seconds; the LP/ILP dual bound where the ILP ran
    method: str  # "ilp", "ilp (time limit)", "local search"
    solve_seconds: float
    variables: int

    @property
    def gap(self) -> float | None:
        if self.lower_bound is None:
            return None
        return max(0.0, (self.seconds - self.lower_bound) / self.seconds) if self.seconds > 0 else 0.0


def solve(problem: ShardingProblem, method: str = "auto", time_limit: float = 60.0) -> Solution:
    start = time.perf_counter()
    size = problem.size
    if method == "local" or (method == "auto" and size > MAX_ILP_VARIABLES):
        a = local_search(problem)
        seconds, memory = evaluate(problem, a)
        return Solution(a, seconds, memory, None, "local search", time.perf_counter() - start, size)
    a, bound, hit_limit, variables = _ilp(problem, time_limit)
    seconds, memory = evaluate(problem, a)
    return Solution(a, seconds, memory, bound, "ilp (time limit)" if hit_limit else "ilp",
                    time.perf_counter() - start, variables)


class _Program:
    """Columns and rows of the linear program, built up sparse."""

    def __init__(self):
        self.cost: list[float] = []
        self.integer: list[int] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.fixed_zero: list[int] = []

    def columns(self, costs, integer: bool) -> int:
        first = len(self.cost)
        self.cost.extend(costs)
        self.integer.extend([1 if integer else 0] * len(costs))
        return first

    def forbid(self, column: int) -> None:
        self.fixed_zero.append(column)

    def row(self, entries, lo: float, hi: float) -> None:
        r = len(self.lower)
        for c, v in entries:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lower.append(lo)
        self.upper.append(hi)


def _ilp(problem: ShardingProblem, time_limit: float):
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    lp = _Program()
    group_unary = [list(g.unary) for g in problem.groups]
    op_seconds = [list(o.seconds) for o in problem.ops]
    paired = []
    for i, op in enumerate(problem.ops):
        for use in op.uses:
            cands = problem.groups[use.group].candidates
            if len(cands) == 1:
                for s in range(len(op.strategies)):
                    op_seconds[i][s] += use.seconds[use.wanted[s]][0]
            elif len(op.strategies) == 1:
                for c in range(len(cands)):
                    group_unary[use.group][c] += use.seconds[use.wanted[0]][c]
            else:
                paired.append((i, use))
    # A forbidden choice is a column fixed at 0, not a large cost: HiGHS's tolerances stay meaningful.
    z = [lp.columns([_finite(v) for v in u], True) for u in group_unary]
    x = [lp.columns([_finite(v) for v in secs], True) for secs in op_seconds]
    for first, costs in zip(z + x, group_unary + op_seconds):
        for k, v in enumerate(costs):
            if v == FORBIDDEN:
                lp.forbid(first + k)
    for g, first in zip(problem.groups, z):
        lp.row([(first + c, 1.0) for c in range(len(g.candidates))], 1, 1)
    for op, first in zip(problem.ops, x):
        lp.row([(first + s, 1.0) for s in range(len(op.strategies))], 1, 1)
    for i, use in paired:
        n_c = len(problem.groups[use.group].candidates)
        # Only allowed pairs get a column: a forbidden pair is simply absent from the rows.
        allowed = [(w, c) for w in range(len(use.shardings)) for c in range(n_c) if use.seconds[w][c] != FORBIDDEN]
        first = lp.columns([use.seconds[w][c] * TIME_SCALE for w, c in allowed], False)
        by_w: dict[int, list[int]] = {}
        by_c: dict[int, list[int]] = {}
        for k, (w, c) in enumerate(allowed):
            by_w.setdefault(w, []).append(first + k)
            by_c.setdefault(c, []).append(first + k)
        for w in range(len(use.shardings)):
            entries = [(col, 1.0) for col in by_w.get(w, [])]
            entries += [(x[i] + s, -1.0) for s, ws in enumerate(use.wanted) if ws == w]
            lp.row(entries, 0, 0)
        for c in range(n_c):
            lp.row([(col, 1.0) for col in by_c.get(c, [])] + [(z[use.group] + c, -1.0)], 0, 0)
    for a, b in problem.ties:
        for c in range(len(problem.groups[a].candidates)):
            lp.row([(z[a] + c, 1.0), (z[b] + c, -1.0)], 0, 0)
    if problem.budget_bytes is not None and problem.memory:
        entries: dict[int, float] = {}
        for m in problem.memory:
            for c, nbytes in enumerate(m.bytes):
                entries[z[m.group] + c] = entries.get(z[m.group] + c, 0.0) + nbytes * MEMORY_SCALE
        lp.row(sorted(entries.items()), -np.inf, problem.budget_bytes * MEMORY_SCALE)
    n = len(lp.cost)
    matrix = csr_array((lp.vals, (lp.rows, lp.cols)), shape=(len(lp.lower), n))
    upper = np.ones(n)
    upper[lp.fixed_zero] = 0.0
    result = milp(np.array(lp.cost), integrality=np.array(lp.integer), bounds=Bounds(0, upper),
                  constraints=LinearConstraint(matrix, lp.lower, lp.upper),
                  options={"time_limit": time_limit, "mip_rel_gap": 1e-6, "presolve": True})
    if result.x is None:
        if result.status == 2:
            raise NoFeasibleSharding("no choice of candidates fits the arguments and results in the budget")
        raise NoFeasibleSharding(f"the solver found no assignment within {time_limit:g} s ({result.message})")
    values = result.x
    groups = tuple(int(np.argmax(values[f:f + len(g.candidates)])) for g, f in zip(problem.groups, z))
    ops = tuple(int(np.argmax(values[f:f + len(o.strategies)])) for o, f in zip(problem.ops, x))
    bound = getattr(result, "mip_dual_bound", None)
    bound = None if bound is None or not np.isfinite(bound) else float(bound) / TIME_SCALE
    return Assignment(groups, ops), bound, result.status == 1, n


def _finite(seconds: float) -> float:
    return 0.0 if seconds == FORBIDDEN else seconds * TIME_SCALE
