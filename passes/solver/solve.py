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

Above ``TIE_ABOVE`` variables, groups and ops alike share one choice: first those
colour refinement finds symmetric (``symmetry.py``: the LP bound stays the untied
problem's), then, where that is still above the ILP's limit, the repeats in the ops'
order (``repeats.py``: a restriction, its bound the tied problem's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..models.errors import NoFeasibleSharding
from .local_search import local_search
from .repeats import tie_repeats
from .sharding_problem import FORBIDDEN, Assignment, ShardingProblem, evaluate
from .symmetry import tie_symmetric
from .tied_problem import TiedProblem

__all__ = ["MAX_ILP_VARIABLES", "NoFeasibleSharding", "Solution", "SolveMemo", "local_search", "solve"]

# Pair, candidate and strategy variables above which `auto` uses the local search.
MAX_ILP_VARIABLES = 300_000
# Variables above which repeated layers are tied: below, the untied problem solves exactly (in seconds).
TIE_ABOVE = MAX_ILP_VARIABLES
INTEGRAL = 1e-6  # an LP value this close to 0 or 1 is integral
MIP_GAP = 1e-6  # relative: a plan this close to the bound is optimal
# Branch-and-bound nodes the MILP may explore: a count, not a clock, so the plan it returns is the same on a
# loaded machine as on an idle one (HiGHS is deterministic for a given program). No HiGHS call gets a time
# limit: one that stops on the clock returns whatever it had by then, another plan on a slower machine.
MIP_NODES = 2_000
FACE = 1e-9  # a reduced cost below this fraction of the largest cost is zero: its column stays on the optimal face
TIME_SCALE = 1e6  # seconds -> microseconds: HiGHS's tolerances are absolute
MEMORY_SCALE = 2.0 ** -20  # bytes -> MiB


@dataclass(frozen=True)
class Solution:
    assignment: Assignment
    seconds: float
    memory_bytes: int
    lower_bound: float | None  # seconds; the best bound proved (LP, or the MILP's dual bound)
    method: str  # "lp (integral)", "lp (rounded)", "ilp", "ilp (time limit)", "local search"
    solve_seconds: float
    variables: int  # columns of the program solved (after tying and folding)
    lp_bound: float | None = None  # seconds; the LP relaxation's optimum, where it was solved
    untied_variables: int | None = None  # the problem's size before repeated layers were tied; None: not tied
    periods: tuple[int, ...] = ()  # the repeat lengths tied, in ops
    tied_by: tuple[str, ...] = ()  # "symmetry" (the LP bound is the untied problem's), then "repeats" (a restriction)

    @property
    def bound_of_untied(self) -> bool:
        """Whether the LP bound bounds the problem as given (untied, or tied by symmetry only), not only the
        tied problem solved."""
        return "repeats" not in self.tied_by

    @property
    def gap(self) -> float | None:
        if self.lower_bound is None:
            return None
        return max(0.0, (self.seconds - self.lower_bound) / self.seconds) if self.seconds > 0 else 0.0

    @property
    def certified_gap(self) -> float | None:
        """(plan - LP bound) / LP bound: how far above the optimum the plan can be, at most."""
        if self.lp_bound is None:
            return None
        if self.lp_bound <= 0:
            return 0.0 if self.seconds <= 0 else None
        return max(0.0, (self.seconds - self.lp_bound) / self.lp_bound)


class SolveMemo(Protocol):
    """Solutions kept between runs (the analyzer's, in the analysis cache's folder): ``get`` the one a run made
    of this problem by this method, or None; ``put`` one made."""

    def get(self, problem: ShardingProblem, method: str) -> Solution | None: ...

    def put(self, problem: ShardingProblem, method: str, solution: Solution) -> None: ...


def solve(problem: ShardingProblem, method: str = "auto", time_limit: float = 60.0,
          tie: bool | None = None) -> Solution:
    """``tie``: solve with groups and ops alike tied (``_tied``); None: where the
    problem is above ``TIE_ABOVE`` variables. ``time_limit`` stops nothing: the MILP is bounded by
    ``MIP_NODES`` branch-and-bound nodes, never a clock, so a problem gets the same plan on every machine
    (the argument stays for the callers, which report it)."""
    start = time.perf_counter()
    untied_size = problem.size
    tied, tied_by = _tied(problem, method) if (untied_size > TIE_ABOVE if tie is None else tie) else (None, ())
    solved = tied.problem if tied is not None else problem
    size = solved.size
    lp_bound = None
    if method == "local" or (method == "auto" and size > MAX_ILP_VARIABLES):
        a, bound, how, variables = local_search(solved), None, "local search", size
    else:
        a, bound, lp_bound, how, variables = _ilp(solved)
    if tied is not None:
        a = tied.expand(a)
    seconds, memory = evaluate(problem, a)
    return Solution(a, seconds, memory, bound, how, time.perf_counter() - start, variables, lp_bound,
                    untied_size if tied is not None else None, tied.periods if tied is not None else (), tied_by)


def _tied(problem: ShardingProblem, method: str) -> tuple[TiedProblem | None, tuple[str, ...]]:
    """The problem tied, and by what: symmetric groups and ops first (exact for the LP); still above the
    ILP's limit, or with none, the repeated runs of the ops' order on top, each run's first and last copy
    free, then, still above the limit, tied too (a 3-D mesh: a layer is ~120,000 variables)."""
    tied = tie_symmetric(problem)
    base = tied.problem if tied is not None else problem
    if tied is not None and base.size <= MAX_ILP_VARIABLES:
        return tied, ("symmetry",)
    more = tie_repeats(base)
    if (more is None or more.problem.size > MAX_ILP_VARIABLES) and method != "local":
        more = tie_repeats(base, free_ends=False) or more
    if more is None:
        return tied, ("symmetry",) if tied is not None else ()
    if tied is None:
        return more, ("repeats",)
    return tied.then(more), ("symmetry", "repeats")


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


def _ilp(problem: ShardingProblem):
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
    cost, bounds = np.array(lp.cost), Bounds(0, upper)
    constraints = LinearConstraint(matrix, lp.lower, lp.upper)
    # The LP relaxation first: integral on most of this problem class, and its optimum bounds every plan.
    integer = np.array(lp.integer, dtype=bool)
    relaxed = _on_the_optimal_face(cost, integer, bounds, matrix, lp)
    lp_bound, rounded = None, None
    if relaxed is not None:
        lp_bound = relaxed[0] / TIME_SCALE
        values = relaxed[1]
        if not integer.any() or np.abs(values[integer] - np.round(values[integer])).max() <= INTEGRAL:
            return _argmax(problem, values, z, x), lp_bound, lp_bound, "lp (integral)", n
        rounded = _rounded(problem, values, z)
        if rounded is not None and rounded[1] <= lp_bound + abs(lp_bound) * MIP_GAP:
            return rounded[0], lp_bound, lp_bound, "lp (rounded)", n
    result = milp(cost, integrality=np.array(lp.integer), bounds=bounds, constraints=constraints,
                  options={"mip_rel_gap": MIP_GAP, "presolve": True, "node_limit": MIP_NODES})
    if result.x is None:
        if rounded is not None:
            return rounded[0], lp_bound, lp_bound, "lp (rounded, time limit)", n
        if result.status == 2:
            raise NoFeasibleSharding("no choice of candidates fits the arguments and results in the budget")
        raise NoFeasibleSharding(f"the solver found no assignment within {MIP_NODES:,} branch-and-bound nodes "
                                 f"({result.message})")
    a = _argmax(problem, result.x, z, x)
    dual = getattr(result, "mip_dual_bound", None)
    dual = None if dual is None or not np.isfinite(dual) else float(dual) / TIME_SCALE
    bound = max((b for b in (lp_bound, dual) if b is not None), default=None)
    if rounded is not None and rounded[1] < evaluate(problem, a)[0]:
        a = rounded[0]
    return a, bound, lp_bound, _stopped(result), n


def _on_the_optimal_face(cost, integer, bounds, matrix, lp: _Program):
    """(the LP's optimum, of its optimal solutions the one least in a fixed pseudo-random price of the
    choice columns), or None where the LP did not solve to optimality. Plans tie often (symmetric mesh
    axes, layers alike) and HiGHS does not always reach the same optimal vertex: measured, one problem (the
    FSDP x TP step's second plan on H100) solved twice in one process gave two plans of equal cost, and the
    refine loop and the report followed each. The optimal face is the LP's feasible set with every column
    of positive reduced cost at its lower bound (negative: its upper) and a budget row of nonzero dual
    tight, so the second LP is the first with columns fixed."""
    from scipy.optimize import linprog

    lower, upper = np.asarray(lp.lower, dtype=float), np.asarray(lp.upper, dtype=float)
    eq = lower == upper
    rows = np.flatnonzero(~eq)  # the budget row: -inf <= memory <= budget
    box = np.c_[np.zeros(len(cost)), bounds.ub * np.ones(len(cost))]
    a_ub, b_ub = (matrix[rows], upper[rows]) if len(rows) else (None, None)
    first = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=matrix[np.flatnonzero(eq)], b_eq=lower[eq], bounds=box,
                    method="highs", options={"presolve": True})
    if first.status != 0 or first.x is None:
        return None
    scale = max(1.0, float(np.abs(cost).max()))
    face = box.copy()
    face[first.lower.marginals > FACE * scale, 1] = 0.0
    at_upper = first.upper.marginals < -FACE * scale
    face[at_upper, 0] = face[at_upper, 1]
    b_low = None
    if len(rows) and first.ineqlin.marginals.size and first.ineqlin.marginals.min() < -FACE * scale:
        b_low = upper[rows]  # the budget is spent in every optimal plan
    price = np.random.default_rng(0).random(len(cost)) * integer
    if b_low is not None:
        second = linprog(price, A_eq=matrix[np.r_[np.flatnonzero(eq), rows]], b_eq=np.r_[lower[eq], b_low],
                         bounds=face, method="highs", options={"presolve": True})
    else:
        second = linprog(price, A_ub=a_ub, b_ub=b_ub, A_eq=matrix[np.flatnonzero(eq)], b_eq=lower[eq],
                         bounds=face, method="highs", options={"presolve": True})
    return float(first.fun), (second.x if second.status == 0 and second.x is not None else first.x)


def _stopped(result) -> str:
    """The MILP's method: proved to the gap, stopped by the clock (status 1), or by the node count
    (scipy reports HiGHS's node limit as an unrecognized status, 4, with the incumbent)."""
    return "ilp" if result.status == 0 else "ilp (time limit)" if result.status == 1 else "ilp (node limit)"


def _argmax(problem: ShardingProblem, values, z: list[int], x: list[int]) -> Assignment:
    groups = tuple(int(np.argmax(values[f:f + len(g.candidates)])) for g, f in zip(problem.groups, z))
    ops = tuple(int(np.argmax(values[f:f + len(o.strategies)])) for o, f in zip(problem.ops, x))
    return Assignment(groups, ops)


def _rounded(problem: ShardingProblem, values, z: list[int]) -> tuple[Assignment, float] | None:
    """A fractional LP solution rounded: each group its largest candidate, each op its
    cheapest strategy given its groups (exact once the groups are fixed); None when
    that breaks a tie, the budget or a forbidden pair."""
    groups = tuple(int(np.argmax(values[f:f + len(g.candidates)])) for g, f in zip(problem.groups, z))
    if any(groups[a] != groups[b] for a, b in problem.ties):
        return None
    ops = tuple(min(range(len(op.strategies)), key=lambda s, op=op: (op.seconds[s] + sum(
        u.seconds[u.wanted[s]][groups[u.group]] for u in op.uses), s)) for op in problem.ops)
    a = Assignment(groups, ops)
    seconds, memory = evaluate(problem, a)
    if seconds == FORBIDDEN or (problem.budget_bytes is not None and memory > problem.budget_bytes):
        return None
    return a, seconds


def _finite(seconds: float) -> float:
    return 0.0 if seconds == FORBIDDEN else seconds * TIME_SCALE
