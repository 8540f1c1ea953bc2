"""The suggest pipeline: ``SUGGEST``'s stages, from a target's StableHLO to the
plans the analyzer compiles: Shardy's sharding rules on the flattened call graph,
the sharding graph, the ILP problem (``problem``, stages 1 to 4, the analyzer's checks of
the request its callbacks), then solve and refine (``refine``, stages 5 and 6, the analyzer's edit of
the module its callback), and each plan's cost model (stage 7); the budget loop around the analyzer's
compiles of the plans and the chosen shardings (stages 8 to 11, ``suggest_budget.py``).

Solve, then check the plan against propagation, and solve again without the
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
no argument is to blame, or after ``MAX_SOLVES`` solves (never on a clock: the plans, and so the
report, are the same however long the solves took). The module with a plan's shardings pinned is
the analyzer's to write (``Repinned``): only it edits and parses StableHLO text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jaxlib.mlir import ir

from ..common.axes import label, sharding_labels
from ..hlo.step_time import collective_seconds, significant
from ..models.device_spec import DeviceSpec
from ..models.entry import EntrySignature, RoundTrip
from ..models.errors import NoFeasibleSharding, ShardyRejected
from ..models.report import TensorInfo
from ..models.suggest import ChosenSharding, ModelCost, PlanCheck, SolverStats
from ..propagation.call_graph import flatten_call_graph
from ..propagation.graph import ShardingGraph
from ..propagation.sharding_graph import build_graph
from ..propagation.shardy_reference import with_sharding_rules
from ..solver.problem import ProblemInput, build_problem
from ..solver.refine import LayoutCheck
from ..solver.sharding_problem import Assignment, ShardingProblem, breakdown, local_bytes, pin_groups, restrict_groups
from ..solver.solve import Solution, SolveMemo, solve
from ..source.frames import CodeOwnership
from ..stablehlo.loop_trips import entry_results, value_repeats
from ..stablehlo.module import jitted_function_name
from ..stablehlo.state_roundtrip import correspond
from .entry import entry_signature
from .pass_manager import Pipeline
from .plan_check import PlanMemo, checked_plan

# What the analyzer catches (Shardy refusing the module, a result that is not a tensor, no sharding within
# the budget), the solutions its solve memo keeps, and the problem and graph it holds (the solver fixes cut
# the problem to a finding's arguments).
__all__ = ["Assignment", "ResultNotATensor", "ShardingGraph", "ShardingProblem", "Solution",
           "restrict_groups"]

SUGGEST = Pipeline("suggest", (
    "entry-signature", "sharding-rules", "sharding-graph", "sharding-problem", "solve", "propagation-check",
    "model-cost", "plan-pins", "plan-checks", "budget-round", "chosen-shardings",
), reads={
    "entry-signature": (),
    "sharding-rules": (),
    "sharding-graph": ("sharding-rules",),
    "sharding-problem": ("entry-signature", "sharding-rules", "sharding-graph"),
    "solve": ("sharding-problem",),
    "propagation-check": ("sharding-graph", "sharding-problem", "solve"),
    "model-cost": ("sharding-problem", "solve"),
    "plan-pins": ("sharding-problem", "solve"),
    # suggest_budget.py: each plan compiled with its pins, checked, and the one kept within the budget.
    "plan-checks": ("solve", "propagation-check", "model-cost", "plan-pins"),
    "budget-round": ("solve", "model-cost", "plan-pins"),
    "chosen-shardings": ("entry-signature", "sharding-problem", "budget-round"),
})

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


# The module with a plan's argument and result shardings pinned, parsed (the analyzer edits the StableHLO):
# (argument pins, result pins) -> module.
Repinned = Callable[[dict[int, list[list[str]]], dict[int, list[list[str]]]], ir.Module]
Pins = dict[int, list[list[str]]]


class ResultNotATensor(ValueError):
    """A result of the entry function that is not a tensor value: the problem has no group for it."""

    def __init__(self, index: int):
        super().__init__(f"result {index} is not a tensor value")
        self.index = index


@dataclass(frozen=True)
class SuggestProblem:
    """A target's sharding problem, with what it was built from (the refine loop reads the graph's ids)."""

    signature: EntrySignature
    problem: ShardingProblem
    fixed: dict[str, tuple[list[list[str]], str]]  # argument path -> (sharding, why it is pinned)
    state: tuple[RoundTrip, ...]  # the outputs that are inputs coming back
    graph: ShardingGraph


def suggest_problem(module: ir.Module, ownership: CodeOwnership, free_axes: Callable[[EntrySignature], tuple[str, ...]],
            fixed: Callable[[EntrySignature], dict[str, tuple[list[list[str]], str]]], spec: DeviceSpec,
            budget: int | None) -> SuggestProblem:
    """Stages 1 to 4 in order. The analyzer's callbacks read the request against the signature: the axes
    to shard over (the mesh and the asked axes checked), and the arguments held as written (after the graph,
    as ``--fix`` names them). Raises ``ShardyRejected`` (stage 2) and ``ResultNotATensor`` (stage 3)."""
    sig = entry_signature(module, SUGGEST)  # 1
    free = free_axes(sig)
    ruled = sharding_rules(module)
    g, args, results = sharding_graph(ruled, ownership)
    if None in results:
        raise ResultNotATensor(results.index(None))
    pinned = fixed(sig)
    built, pairs = sharding_problem(ruled, g, sig, args, tuple(r for r in results if r is not None), free, pinned,
                                    spec, budget)
    return SuggestProblem(sig, built, pinned, pairs, g)


def function_name(module: ir.Module) -> str | None:
    """The function jit lowered, as the pasted ``jax.jit(...)`` names it (None: a lambda's, or none)."""
    return jitted_function_name(module)


def sharding_rules(module: ir.Module) -> ir.Module:
    """Stage 2: Shardy's op sharding rules on the module, its call graph flattened first (each call site its
    own choices: Shardy flattens the call graph the same way). Raises ``ShardyRejected``."""
    return SUGGEST.run("sharding-rules", lambda m: with_sharding_rules(flatten_call_graph(m)), module)


def sharding_graph(ruled: ir.Module, ownership: CodeOwnership,
                   ) -> tuple[ShardingGraph, tuple[int, ...], list[int | None]]:
    """Stage 3: the graph, the entry's argument tensors, and the tensor each result returns (None: a result
    that is not a tensor value)."""
    g = SUGGEST.run("sharding-graph", build_graph, ruled, ownership)
    args = tuple(t for t, f in g.function_args if f == g.entry)
    return g, args, SUGGEST.run("sharding-graph", entry_results, ruled, g.value_ids)


def sharding_problem(
    ruled: ir.Module, g: ShardingGraph, sig: EntrySignature, arguments: tuple[int, ...], results: tuple[int, ...],
    free: tuple[str, ...], fixed: dict[str, tuple[list[list[str]], str]], spec: DeviceSpec, budget: int | None,
) -> tuple[ShardingProblem, tuple[RoundTrip, ...]]:
    """Stage 4: the ILP problem over the free axes (``fixed``: argument path -> its sharding and why it is
    pinned), and the state coming back (outputs that are inputs)."""
    return SUGGEST.run("sharding-problem", _problem, ruled, g, sig, arguments, results, free, fixed, spec, budget)


def _problem(
    ruled: ir.Module, g: ShardingGraph, sig: EntrySignature, args: tuple[int, ...], results: tuple[int, ...],
    free: tuple[str, ...], fixed: dict[str, tuple[list[list[str]], str]], spec: DeviceSpec, budget: int | None,
) -> tuple[ShardingProblem, tuple[RoundTrip, ...]]:
    sizes = dict(sig.mesh.axes)
    labels = dict(sizes)
    pinned: dict[int, tuple[tuple[tuple[str, ...], ...], str]] = {}
    open_dims: dict[int, tuple[int, ...]] = {}
    for t in g.tensors:
        if t.seed and not t.seed.startswith(("argument", "out_shardings of result")):
            for ref in (r for axes in t.dims for r in axes):
                labels.setdefault(label(ref, sizes), ref[2])  # a sub-axis ("x:(1)2") has its own size
            pinned[t.id] = (sharding_labels(t.dims, sizes), f"stated in the program ({t.seed})")
            open_dims[t.id] = tuple(d for d, closed in enumerate(t.closed) if not closed)
    for i, tid in enumerate(args):
        if sig.inputs[i].path in fixed:
            sharding, why = fixed[sig.inputs[i].path]
            pinned[tid] = (tuple(tuple(a) for a in sharding), why)
    pairs = correspond(sig)
    donated_out = {rt.output.index for rt in pairs if rt.input.donated}
    problem = build_problem(g, ProblemInput(
        free_axes=free, axis_sizes=labels, spec=spec, repeats=value_repeats(ruled, g.value_ids), arguments=tuple(args),
        results=tuple(results),
        argument_paths=tuple(t.path for t in sig.inputs), result_paths=tuple(o.path for o in sig.outputs),
        pinned=pinned, ties=tuple((rt.input.index, rt.output.index) for rt in pairs),
        result_donated=tuple(o.index in donated_out for o in sig.outputs), budget_bytes=budget,
        open_dims=open_dims,
    ))
    return problem, pairs


def pins(problem: ShardingProblem, a: Assignment, groups: tuple[int, ...]) -> dict[int, list[list[str]]]:
    return {i: [list(axes) for axes in problem.groups[g].candidates[a.groups[g]]] for i, g in enumerate(groups)}


def _exclude(problem: ShardingProblem, current: ShardingProblem, a: Assignment, check: LayoutCheck,
             tied: dict[int, set[int]], keep: dict[int, tuple[int, ...]],
             excluded: list[tuple[int, int, str]]) -> bool:
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


def _check(current: ShardingProblem, solution: Solution, graph: ShardingGraph, repinned: Repinned,
           ownership: CodeOwnership, spec: DeviceSpec) -> LayoutCheck | None:
    module = repinned(pins(current, solution.assignment, current.arguments),
                      pins(current, solution.assignment, current.results))
    return checked_plan(current, solution.assignment, graph, module, ownership, spec)


def refine(problem: ShardingProblem, graph: ShardingGraph, repinned: Repinned, ownership: CodeOwnership,
           method: str, time_limit: float, spec: DeviceSpec, memo: PlanMemo | None = None) -> Refined:
    """Stages 5 and 6, solve and check against propagation, as a loop: the plans of at most ``MAX_SOLVES``
    solves (``graph``: the one the problem was built from; ``memo``: solutions and checks a run made before)."""
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
            solution = _solved(current, method, time_limit, memo)
        except NoFeasibleSharding:
            if not plans:
                raise  # the problem itself has no solution: the caller says so
            break  # the exclusions left none within the budget
        spent += solution.solve_seconds
        # None when the propagated graph does not match the problem, or Shardy rejects the module.
        known, check = memo.get_check(current, solution.assignment) if memo is not None else (False, None)
        if not known:
            try:
                check = SUGGEST.run("propagation-check", _check, current, solution, graph, repinned, ownership, spec)
            except (ShardyRejected, ValueError):
                pass
            if memo is not None:
                memo.put_check(current, solution.assignment, check)
        plans.append(Plan(current, solution, check, tuple(excluded), solves))
        if check is None or check.seconds <= solution.seconds * (1 + CLOSE) or not check.culprits:
            break
        if not _exclude(problem, current, solution.assignment, check, tied, keep, excluded):
            break
    return Refined(tuple(plans), spent)


def _solved(problem: ShardingProblem, method: str, time_limit: float, memo: SolveMemo | None) -> Solution:
    """Stage 5: the problem solved, or the solution ``memo`` kept of it (the solve is deterministic)."""
    if (solution := memo.get(problem, method) if memo is not None else None) is None:
        solution = SUGGEST.run("solve", solve, problem, method, time_limit)
        if memo is not None:
            memo.put(problem, method, solution)
    return solution


def model_cost(problem: ShardingProblem, a: Assignment) -> ModelCost:
    """Stage 7: the solver's cost model of an assignment, by part."""
    return SUGGEST.run("model-cost", _model_cost, problem, a)


def _model_cost(problem: ShardingProblem, a: Assignment) -> ModelCost:
    compute, reduction, reshard = breakdown(problem, a)
    return ModelCost(seconds=significant(compute + reduction + reshard), compute_seconds=significant(compute),
                     reduction_seconds=significant(reduction), reshard_seconds=significant(reshard))


def pinned_model_cost(problem: ShardingProblem, argument_pins: Pins, method: str,
                      time_limit: float, memo: SolveMemo | None = None) -> ModelCost | None:
    """The cost model of these argument shardings with the best intermediates the solver finds for them
    (None: no such assignment)."""
    pinned = pin_groups(problem, {problem.arguments[i]: tuple(tuple(a) for a in s) for i, s in argument_pins.items()})
    if pinned is None:
        return None
    try:
        model = _solved(pinned, method, time_limit, memo)
    except NoFeasibleSharding:
        return None
    return model_cost(pinned, model.assignment)


def chosen_shardings(infos: tuple[TensorInfo, ...], chosen: Pins, problem: ShardingProblem,
                     why: dict[str, str]) -> list[ChosenSharding]:
    """Stage 11: each argument (or result) with its sharding as written and as chosen, and their per-device
    bytes."""
    return SUGGEST.run("chosen-shardings", _chosen_shardings, infos, chosen, problem, why)


def _chosen_shardings(infos: tuple[TensorInfo, ...], chosen: Pins, problem: ShardingProblem,
                      why: dict[str, str]) -> list[ChosenSharding]:
    out = []
    for x in infos:
        sharding = chosen.get(x.index) or [[] for _ in x.shape]
        out.append(ChosenSharding(
            index=x.index, path=x.path, shape=list(x.shape), dtype=x.dtype, current=x.sharding,
            suggested=sharding, current_per_device_bytes=x.per_device_bytes,
            suggested_per_device_bytes=local_bytes(tuple(x.shape), x.dtype, tuple(tuple(a) for a in sharding),
                                                   problem.axis_sizes),
            pinned=why.get(x.path),
        ))
    return out


def plan_check(plan: Plan, input_paths: list[str], estimated_seconds: float | None, peak_bytes: int | None,
               error: str | None) -> PlanCheck:
    """A plan as the solver saw it, as propagation realized it, and as XLA compiled it."""
    check = plan.check
    return PlanCheck(
        solve=plan.solve, objective_seconds=significant(plan.solution.seconds),
        propagated_seconds=None if check is None else significant(check.seconds),
        differing_values=None if check is None else len(check.differing),
        excluded=[f"{input_paths[i]}: no {axis!r} on dimension {dim}" for i, dim, axis in plan.excluded],
        estimated_seconds=estimated_seconds, peak_bytes=peak_bytes, error=error,
    )


def solver_stats(problem: ShardingProblem, refined: Refined, kept: Plan, rounds: int,
                 checks: list[PlanCheck]) -> SolverStats:
    """What the solves did: the kept plan's method, size, objective, bounds and gaps, and every plan checked."""
    solution = kept.solution
    return SolverStats(
        method=solution.method, variables=solution.variables, value_groups=len(problem.groups),
        ops=len(problem.ops),
        objective_seconds=significant(solution.seconds),
        lower_bound_seconds=None if solution.lower_bound is None else significant(solution.lower_bound),
        gap=None if solution.gap is None else round(solution.gap, 6), rounds=rounds, plans=checks,
        untied_variables=solution.untied_variables, tied_by=list(solution.tied_by),
        lp_bound_seconds=None if solution.lp_bound is None else significant(solution.lp_bound),
        certified_gap=None if solution.certified_gap is None else round(solution.certified_gap, 6),
        kept=kept.solve,
    )


SCALAR_BYTES = 4


def time_resolution(spec: DeviceSpec, sig: EntrySignature) -> float:
    """The smallest difference of estimated step time that ``suggest`` reads as a difference: the
    latency the cost model charges one all-reduce of a scalar over the program's whole mesh (2(n-1) ring
    steps; its devices where no mesh is named). Two versions apart by less differ by about one small
    collective's latency, which XLA's combiners and async scheduling add or remove at will and the model
    cannot tell apart (8 CPU devices: 140 us; a step of 14 ms or more is compared at its 1% instead).
    suggest and lint's solver fixes both take it from here, so they compare versions alike."""
    devices = sig.mesh.size if sig.mesh.axes else sig.num_partitions
    return collective_seconds("all-reduce", SCALAR_BYTES, devices, False, spec) if devices > 1 else 0.0
