"""The solver's LP bound and certified gap, and repeated layers tied to one strategy.

The optimum is brute-forced here (every candidate of every group); the bound the
solver reports must lie below it and the plan above it, and the certified gap
must be (plan - bound) / bound. Tying is checked on real unrolled layer stacks:
the tied plan, spread back over the layers, costs on the untied problem what the
tied problem said, is never below the untied optimum, and the tied problem does
not grow with depth."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from test_suggest import _lowered, _mesh, _problem_of, _programs, brute_force

from jax_shard_lint.passes.solver.repeats import tie_repeats
from jax_shard_lint.passes.solver.sharding_problem import (
    OpChoice,
    ShardingProblem,
    Use,
    ValueGroup,
    evaluate,
)
from jax_shard_lint.passes.solver.solve import MIP_NODES, solve

TOL = 1e-9


def _check_bound(problem, optimum):
    solution = solve(problem, "ilp")
    assert solution.lp_bound is not None
    assert solution.lp_bound <= optimum * (1 + TOL) + 1e-15
    assert optimum <= solution.seconds * (1 + TOL) + 1e-15
    if solution.lp_bound > 0:
        assert solution.certified_gap == pytest.approx((solution.seconds - solution.lp_bound) / solution.lp_bound,
                                                       rel=1e-9, abs=1e-12)
        assert solution.certified_gap >= (solution.seconds - optimum) / optimum - 1e-9
    return solution


@pytest.mark.parametrize("name, lowered, budget", [p for p in _programs() if p[2] is None][:3],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_lp_bound_is_below_the_brute_force_optimum_and_the_plan_above(name, lowered, budget):
    problem = _problem_of(lowered)
    solution = _check_bound(problem, brute_force(problem))
    # On these programs the relaxation is integral, as on the problem class in general: gap 0.
    assert solution.method == "lp (integral)"
    assert solution.certified_gap is not None and solution.certified_gap <= 1e-6


def _frustrated_triangle() -> ShardingProblem:
    """Three tensors of two candidates each and three ops, each wanting its two
    tensors on opposite candidates (an odd cycle: no assignment satisfies all
    three). The LP relaxation takes every choice at one half and pays nothing; the
    integral optimum pays one reshard. Every candidate also costs 1 s, so the
    bound is above zero."""
    cands = (((),), (("d",),))
    groups = tuple(ValueGroup(g, (g,), (4,), "f32", cands, (1.0, 1.0)) for g in range(3))
    reshard = ((0.0, 1.0), (1.0, 0.0))  # [wanted][candidate]
    ops = tuple(OpChoice(i, "custom", ((), ()), (0.0, 0.0), (0.0, 0.0),
                         (Use(a, False, (0, 1), cands, reshard), Use(b, False, (1, 0), cands, reshard)), 1)
                for i, (a, b) in enumerate(((0, 1), (1, 2), (2, 0))))
    return ShardingProblem({"d": 2}, ("d",), groups, ops, (), None, (), (0,), (2,))


def test_a_fractional_relaxation_runs_the_milp_and_certifies_the_gap():
    problem = _frustrated_triangle()
    optimum = brute_force(problem)
    assert optimum == pytest.approx(4.0)
    solution = _check_bound(problem, optimum)
    assert solution.method == "ilp"
    assert solution.seconds == pytest.approx(optimum)
    assert solution.lp_bound == pytest.approx(3.0)
    assert solution.certified_gap == pytest.approx(1 / 3)


def _stack(layers: int, mesh):
    """An unrolled stack of pre-norm MLP blocks with residuals, its gradient and an SGD update."""
    def step(ws, x):
        for w1, w2 in ws:
            h = x - x.mean(-1, keepdims=True)
            h = h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-5)
            x = x + jnp.tanh(h @ w1) @ w2
        return (x * x).sum()

    grad = jax.grad(step)

    def spec(shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P()))

    ws = [(spec((16, 32)), spec((32, 16))) for _ in range(layers)]
    return jax.jit(lambda ws, x: jax.tree.map(lambda w, g: w - 0.1 * g, ws, grad(ws, x))).lower(ws, spec((8, 16)))


def test_repeated_layers_share_one_strategy_and_cost_what_the_tied_problem_says():
    mesh = jax.make_mesh((2, 2), ("a", "b"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:4])
    sizes = {}
    for layers in (4, 8):
        problem = _problem_of(_stack(layers, mesh))
        tied = tie_repeats(problem)
        assert tied is not None
        sizes[layers] = (problem.size, len(problem.ops), len(tied.problem.ops))
        assert tied.problem.size < problem.size
        # Tying each run's first and last copy as well (solve does where the problem is still too large) ties more.
        ends_tied = tie_repeats(problem, free_ends=False)
        assert ends_tied is not None and ends_tied.problem.size < tied.problem.size
        plan = solve(tied.problem, "ilp")
        expanded = tied.expand(plan.assignment)
        assert evaluate(problem, expanded)[0] == pytest.approx(plan.seconds, rel=1e-9)
        # Every layer takes the same strategy at the same position.
        for i, k in enumerate(tied.op_class):
            assert expanded.ops[i] == plan.assignment.ops[k]
        untied = solve(problem, "ilp", tie=False)
        both = solve(problem, "ilp", tie=True)
        assert both.untied_variables == problem.size and both.variables < untied.variables
        assert both.seconds >= untied.seconds * (1 - TOL)
    # The untied problem grows with depth; the tied one by the per-weight update ops only (2 a layer, too
    # short a repeat to tie), not by the layers' 30.
    assert sizes[8][0] > sizes[4][0]
    assert sizes[8][2] - sizes[4][2] <= (sizes[8][1] - sizes[4][1]) // 8


def test_a_small_program_is_not_tied_by_default():
    problem = _problem_of(_lowered(lambda x, w: jnp.tanh(x @ w), _mesh((2,), ("d",)), ((8, 16), P()),
                                   ((16, 8), P())))
    assert solve(problem).untied_variables is None


def test_every_format_shows_the_lp_bound_and_the_certified_gap(cli):
    import io
    import json
    import os

    from rich.console import Console

    from jax_shard_lint.passes.models.suggest import SuggestRun
    from jax_shard_lint.reports.suggest.html import render_suggest_html
    from jax_shard_lint.reports.suggest.markdown import render_suggest_markdown
    from jax_shard_lint.reports.suggest.terminal import render_suggest_terminal

    result = cli("suggest", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_states",
                 "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    run = SuggestRun.model_validate(json.loads(result.out))
    s = run.targets[0].solver
    assert s.lp_bound_seconds is not None and s.certified_gap is not None
    assert s.lp_bound_seconds <= s.objective_seconds * (1 + 1e-6)
    out = io.StringIO()
    render_suggest_terminal(run, Console(file=out, width=400))
    for text in (out.getvalue(), render_suggest_markdown(run), render_suggest_html(run)):
        assert "LP bound" in text and "certified gap" in text


def test_no_highs_call_is_stopped_by_a_clock(monkeypatch):
    """Every HiGHS call the solve makes (the LP, the optimal face, the MILP) runs without a time limit, the
    MILP bounded by its node count: a solve stopped by the clock returns what it had by then, another plan on
    a slower machine. The calls are HiGHS's own (scipy's), recorded on the way; the plan is the brute-force
    optimum."""
    import scipy.optimize

    seen = []

    def recorded(real):
        def call(*args, **kwargs):
            seen.append((real.__name__, dict(kwargs.get("options") or {})))
            return real(*args, **kwargs)
        return call

    for name in ("milp", "linprog"):
        monkeypatch.setattr(scipy.optimize, name, recorded(getattr(scipy.optimize, name)))
    problem = _frustrated_triangle()
    solution = solve(problem, "ilp", time_limit=1e-9)
    assert solution.seconds == pytest.approx(brute_force(problem))
    assert {name for name, _ in seen} == {"milp", "linprog"}
    assert all("time_limit" not in options for _, options in seen)
    assert [options["node_limit"] for name, options in seen if name == "milp"] == [MIP_NODES]


@pytest.mark.parametrize("name, lowered, budget", list(_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_lp_first_plan_costs_the_milps_optimum(name, lowered, budget, monkeypatch):
    """Below the ILP's limit the LP relaxation is solved first and the MILP runs only where it is fractional:
    on every test program the plan it keeps costs what the MILP alone finds (the LP skipped, so scipy's milp
    solves the same program from scratch), and the certified gap is reported beside it, as above the limit."""
    from jax_shard_lint.passes.solver import solve as solve_module

    if budget is not None:
        budget = solve(_problem_of(lowered), "ilp").memory_bytes - 1
    problem = _problem_of(lowered, budget)
    first = solve(problem, "ilp")
    # Integral everywhere but under the binding budget, whose relaxation is fractional: the MILP ran there.
    assert first.method == ("ilp" if budget is not None else "lp (integral)") and first.certified_gap is not None
    monkeypatch.setattr(solve_module, "_on_the_optimal_face", lambda *args: None)
    alone = solve(problem, "ilp")
    assert alone.method == "ilp" and alone.lp_bound is None
    assert first.seconds == pytest.approx(alone.seconds, rel=1e-9, abs=1e-15)
    assert first.lp_bound <= alone.lower_bound * (1 + TOL) + 1e-15


def test_a_fractional_relaxation_keeps_the_milps_optimum(monkeypatch):
    from jax_shard_lint.passes.solver import solve as solve_module

    problem = _frustrated_triangle()
    first = solve(problem, "ilp")
    monkeypatch.setattr(solve_module, "_on_the_optimal_face", lambda *args: None)
    assert first.method == "ilp" and first.seconds == pytest.approx(solve(problem, "ilp").seconds)
