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

The local search (iterated conditional modes) starts from the assignment that
fits the budget best and moves one op or one group (with the groups tied to it)
at a time to its cheapest choice given its neighbours, until nothing improves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .sharding_problem import FORBIDDEN, Assignment, ShardingProblem, evaluate

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


class NoFeasibleSharding(Exception):
    """No assignment of candidates keeps the arguments and results within the budget."""


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


def _memory(problem: ShardingProblem, groups: list[int]) -> int:
    return sum(m.bytes[groups[m.group]] for m in problem.memory)


def _replicated(g) -> int:
    replicated = tuple(() for _ in g.shape)
    return g.candidates.index(replicated) if replicated in g.candidates else 0


def _starts(problem: ShardingProblem) -> list[dict[int, int]]:
    """Argument assignments to start from: replicated; state replicated and data on
    its leading dimension over every free axis (data parallel); every argument on
    its largest dimension over every free axis (FSDP)."""
    state = {a for a, _ in problem.ties}
    everything = set(problem.free_axes)

    def on(g, dims) -> int:
        for d in dims:
            want = tuple(tuple(problem.free_axes) if k == d else () for k in range(len(g.shape)))
            if want in g.candidates:
                return g.candidates.index(want)
        return _replicated(g)

    starts = [{}, {}, {}]
    for gid in set(problem.arguments):
        g = problem.groups[gid]
        if not g.shape or not everything:
            continue
        largest = sorted(range(len(g.shape)), key=lambda d: (-g.shape[d], d))
        starts[1][gid] = _replicated(g) if gid in state else on(g, [0])
        starts[2][gid] = on(g, largest) if gid in state else on(g, [0])
    return starts


def _forward(problem: ShardingProblem, start: dict[int, int], passes: int = 8) -> tuple[list[int], list[int]]:
    """In program order, each op takes its cheapest strategy given the groups decided
    so far, and its undecided results take the sharding it computes: shardings flow
    forward from the arguments, as the cost model requires. A group that a later
    producer cannot give the sharding an earlier one chose (a sum of a sharded and a
    concatenated gradient) is made replicated, which every producer can give, and
    the pass runs again."""
    pinned = dict(start)
    for _ in range(passes):
        groups, ops, conflicts = _forward_pass(problem, pinned)
        if not conflicts:
            break
        for gid in conflicts:
            pinned[gid] = _replicated(problem.groups[gid])
    return groups, ops


def _forward_pass(problem: ShardingProblem, start: dict[int, int]) -> tuple[list[int], list[int], set[int]]:
    groups: list[int | None] = [None] * len(problem.groups)
    for g in problem.groups:
        if len(g.candidates) == 1:
            groups[g.id] = 0
    for gid, c in start.items():
        groups[gid] = c
    for gid in problem.arguments:
        if groups[gid] is None:
            groups[gid] = _replicated(problem.groups[gid])
    for a, b in problem.ties:  # state comes back on the layout it came in on
        groups[b] = groups[a]
    ops: list[int] = []
    conflicts: set[int] = set()
    for op in problem.ops:
        def cost(s: int, op=op) -> float:
            total = op.seconds[s]
            for u in op.uses:
                c = groups[u.group]
                if c is not None:
                    total += u.seconds[u.wanted[s]][c]
                elif u.shardings[u.wanted[s]] not in problem.groups[u.group].candidates:
                    return FORBIDDEN
            return total

        best = min(range(len(op.strategies)), key=lambda s: (cost(s), s))
        ops.append(best)
        for u in op.uses:
            if groups[u.group] is None:
                groups[u.group] = problem.groups[u.group].candidates.index(u.shardings[u.wanted[best]])
            elif u.seconds[u.wanted[best]][groups[u.group]] == FORBIDDEN and u.group not in start:
                conflicts.add(u.group)
    final = [c if c is not None else _replicated(problem.groups[i]) for i, c in enumerate(groups)]
    return final, ops, conflicts


def local_search(problem: ShardingProblem, max_rounds: int = 20) -> Assignment:
    """The best of iterated conditional modes from each forward start (``_starts``)."""
    best, last_error = None, None
    for start in _starts(problem):
        try:
            a = _improve(problem, *_forward(problem, start), max_rounds)
        except NoFeasibleSharding as e:
            last_error = e
            continue
        seconds = evaluate(problem, a)[0]
        if seconds == FORBIDDEN:  # a start that could not be made consistent
            continue
        if best is None or seconds < best[0]:
            best = (seconds, a)
    if best is None:
        raise last_error or NoFeasibleSharding("no assignment fits")
    return best[1]


def _improve(problem: ShardingProblem, groups: list[int], ops: list[int], max_rounds: int) -> Assignment:
    """Iterated conditional modes: one op, or one group with the groups tied to it, at
    a time to its cheapest choice given its neighbours, until nothing improves; a
    move that breaks the budget is taken only to bring an assignment over it down."""
    tied: dict[int, list[int]] = {g.id: [g.id] for g in problem.groups}
    for a, b in problem.ties:
        merged = sorted(set(tied[a]) | set(tied[b]))
        for m in merged:
            tied[m] = merged
    for members in {tuple(v) for v in tied.values()}:
        for m in members[1:]:
            groups[m] = groups[members[0]]
    uses_of: dict[int, list[tuple[int, object]]] = {}
    for i, op in enumerate(problem.ops):
        for use in op.uses:
            uses_of.setdefault(use.group, []).append((i, use))

    def op_cost(i: int, s: int) -> float:
        op = problem.ops[i]
        return op.seconds[s] + sum(u.seconds[u.wanted[s]][groups[u.group]] for u in op.uses)

    def group_cost(members, c: int) -> float:
        return sum(problem.groups[m].unary[c] + sum(u.seconds[u.wanted[ops[i]]][c] for i, u in uses_of.get(m, []))
                   for m in members)

    for _ in range(max_rounds):
        changed = False
        for i, op in enumerate(problem.ops):
            best = min(range(len(op.strategies)), key=lambda s: (op_cost(i, s), s))
            if op_cost(i, best) < op_cost(i, ops[i]) - 1e-15:
                ops[i], changed = best, True
        for members in sorted({tuple(v) for v in tied.values()}):
            here = groups[members[0]]
            for c in range(len(problem.groups[members[0]].candidates)):
                if group_cost(members, c) >= group_cost(members, here) - 1e-15:
                    continue
                trial = list(groups)
                for m in members:
                    trial[m] = c
                if problem.budget_bytes is None or _memory(problem, trial) <= problem.budget_bytes:
                    groups, here, changed = trial, c, True
        if problem.budget_bytes is not None and _memory(problem, groups) > problem.budget_bytes:
            # Over the budget: shard the argument or result that saves the most bytes per second added.
            changed = _shed_memory(problem, groups, tied, group_cost) or changed
        if not changed:
            break
    if problem.budget_bytes is not None and _memory(problem, groups) > problem.budget_bytes:
        raise NoFeasibleSharding("the local search found no assignment that fits the arguments and results in "
                                 "the budget")
    return Assignment(tuple(groups), tuple(ops))


def _shed_memory(problem: ShardingProblem, groups: list[int], tied, group_cost) -> bool:
    memory_groups = sorted({m.group for m in problem.memory})
    best = None
    for gid in memory_groups:
        members = tied[gid]
        here = groups[gid]
        base = _memory(problem, groups)
        for c in range(len(problem.groups[gid].candidates)):
            trial = list(groups)
            for m in members:
                trial[m] = c
            saved = base - _memory(problem, trial)
            if saved <= 0:
                continue
            added = group_cost(members, c) - group_cost(members, here)
            if added == FORBIDDEN:
                continue
            score = (added / saved, gid, c)
            if best is None or score < best[0]:
                best = (score, members, c)
    if best is None:
        return False
    for m in best[1]:
        groups[m] = best[2]
    return True
