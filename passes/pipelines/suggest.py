"""Solve, then check the plan against propagation, and solve again without the
argument shardings that propagation carried where the plan did not want them
(``passes/solver/refine.py`` says why plans and compiled programs part).

Each round propagates the plan's argument and result shardings over the same
flattened module (our propagation, which agrees with Shardy's), prices the layout
propagation reaches with the plan's cost model, and takes the leaking axis off the
argument dimension it leaked from (every candidate with it there, in the argument's
group and the state tied to it) for the arguments that reached the most
disagreeing bytes. ``suggest`` compiles every plan and keeps the fastest; the loop
ends when
propagation realizes the plan (its price within ``CLOSE`` of the plan's), when
no argument is to blame, after ``MAX_SOLVES`` solves, or once the solves together
used the time limit one solve has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...passes.propagation.call_graph import flatten_call_graph
from ...passes.propagation.propagate import propagate
from ...passes.propagation.sharding_graph import ShardingGraph, build_graph
from ...passes.propagation.shardy_reference import ShardyRejected, with_sharding_rules
from ...passes.solver.refine import LayoutCheck, check_layout
from ...passes.solver.sharding_problem import Assignment, ShardingProblem, restrict_groups
from ...passes.solver.solve import NoFeasibleSharding, Solution, solve
from ..adapter import jax_adapter
from ..backend.sharding_edits import with_entry_shardings

MAX_SOLVES = 6
CLOSE = 0.01  # the propagated layout within 1% of the plan: propagation realizes it
SHARE = 0.5  # culprits excluded in one round: those reaching at least half the top one's bytes


@dataclass(frozen=True)
class Plan:
    """One solve of the loop."""

    problem: ShardingProblem  # the problem it solves (candidates excluded)
    solution: Solution
    check: LayoutCheck | None  # None: the propagated graph could not be matched to the problem
    excluded: tuple[tuple[int, int, str], ...]  # (argument index, dimension, axis) no longer offered
    solve: int  # 1 for the first


@dataclass(frozen=True)
class Refined:
    plans: tuple[Plan, ...]
    solve_seconds: float  # all solves together


def pins(problem: ShardingProblem, a: Assignment, groups: tuple[int, ...]) -> dict[int, list[list[str]]]:
    return {i: [list(axes) for axes in problem.groups[g].candidates[a.groups[g]]] for i, g in enumerate(groups)}


def _propagated(t, arg_pins, res_pins) -> tuple[ShardingGraph, tuple[int, ...]]:
    text = with_entry_shardings(t.module, res_pins, t.sig.mesh_name, arg_pins)
    g = build_graph(with_sharding_rules(flatten_call_graph(jax_adapter.parse_stablehlo(text))), t.ownership)
    propagate(g)
    return g, tuple(tid for tid, f in g.function_args if f == g.entry)


def _matched(original: ShardingGraph, propagated: ShardingGraph) -> dict[int, int] | None:
    """Problem tensor id -> propagated tensor id. The graphs are built from one
    module whose entry attributes differ, so every tensor has its id, except the
    holders of stated result shardings (built last, one per stated result): those
    by name."""
    holders = {x.name: x.id for x in propagated.tensors if x.virtual}
    out = {}
    for x in original.tensors:
        if x.virtual and x.seed and x.seed.startswith("out_shardings of result"):
            if x.name not in holders:
                return None
            out[x.id] = holders[x.name]
        elif x.id < len(propagated.tensors) and propagated.tensors[x.id].shape == x.shape:
            out[x.id] = x.id
        else:
            return None
    return out


def _remapped(problem: ShardingProblem, ids: dict[int, int]) -> ShardingProblem:
    return replace(problem, groups=tuple(replace(g, tensors=tuple(ids[t] for t in g.tensors))
                                         for g in problem.groups))


def _exclude(problem: ShardingProblem, current: ShardingProblem, a: Assignment, check: LayoutCheck,
             tied: dict[int, set[int]], keep: dict[int, tuple[int, ...]], excluded: list) -> bool:
    """Take out of the culprits' groups (and the groups tied to them) every candidate
    with the leaking axis on the dimension it leaked from (the next best sharding
    that leaks the same way is no answer); whether anything was taken out."""
    top = check.culprits[0][1]
    any_cut = False
    for (index, dim, axis), reached in check.culprits:
        if reached < top * SHARE:
            break
        cut = False
        for group in sorted({current.arguments[index]} | tied.get(current.arguments[index], set())):
            candidates = problem.groups[group].candidates
            offered = keep.get(group, tuple(range(len(candidates))))
            left = tuple(i for i in offered if dim >= len(candidates[i]) or axis not in candidates[i][dim])
            if left and left != offered:
                keep[group] = left
                cut = True
        if cut and (index, dim, axis) not in excluded:
            excluded.append((index, dim, axis))
        any_cut |= cut
    return any_cut


def refine(t, problem: ShardingProblem, method: str, time_limit: float, spec) -> Refined:
    """The plans of at most ``MAX_SOLVES`` solves, each checked against propagation."""
    tied: dict[int, set[int]] = {}
    for a, b in problem.ties:
        tied.setdefault(a, set()).add(b)
        tied.setdefault(b, set()).add(a)
    keep: dict[int, tuple[int, ...]] = {}
    excluded: list[tuple[int, int, str]] = []
    plans: list[Plan] = []
    spent = 0.0
    for solves in range(1, MAX_SOLVES + 1):
        current = restrict_groups(problem, keep) if keep else problem
        try:
            solution = solve(current, method, time_limit)
        except NoFeasibleSharding:
            if not plans:
                raise  # the problem itself has no solution: the caller says so
            break  # the exclusions left none within the budget
        spent += solution.solve_seconds
        check = None  # when the propagated graph does not match the problem, or Shardy rejects the module
        try:
            g, arguments = _propagated(t, pins(current, solution.assignment, current.arguments),
                                       pins(current, solution.assignment, current.results))
            ids = _matched(t.graph, g)
            if ids is not None:
                check = check_layout(_remapped(current, ids), solution.assignment, g, arguments, spec)
        except (ShardyRejected, ValueError):
            pass
        plans.append(Plan(current, solution, check, tuple(excluded), solves))
        if check is None or check.seconds <= solution.seconds * (1 + CLOSE) or not check.culprits:
            break
        if spent >= time_limit:
            break  # --time-limit caps each solve, and the loop starts no solve once they used it together
        if not _exclude(problem, current, solution.assignment, check, tied, keep, excluded):
            break
    return Refined(tuple(plans), spent)
