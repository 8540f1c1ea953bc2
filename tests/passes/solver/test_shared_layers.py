"""Layers alike share one decision set (``passes/solver/symmetry.py``): the tied
problem does not grow with depth, the layers' kernels take one sharding, the LP
bound stays the untied problem's, and where tying does cost something the
certified gap says so. The XLA oracle: every argument layout of a small layer
stack compiled by XLA and priced from XLA's compiled figures; the tied solve's
layout, compiled, is the best of them or as good."""

import itertools

import jax
import jax.numpy as jnp
import pytest
from hlo_oracle import collectives_per_step
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from test_solver_bound import _frustrated_triangle, _stack
from test_suggest import _mesh, _problem_of, brute_force

from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.passes.solver.sharding_problem import evaluate
from jax_shard_lint.passes.solver.solve import solve
from jax_shard_lint.passes.solver.symmetry import tie_symmetric

TOL = 1e-9


def _grid():
    return jax.make_mesh((2, 2), ("a", "b"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:4])


def test_the_tied_problem_does_not_grow_with_depth_and_the_layers_share_their_kernels():
    mesh = _grid()
    untied, tied = {}, {}
    for layers in (2, 3, 4):
        problem = _problem_of(_stack(layers, mesh))
        shared = tie_symmetric(problem)
        assert shared is not None
        untied[layers], tied[layers] = problem.size, shared.problem.size
        # Arguments: each layer's (w1, w2), then x. The first layer reads the argument x itself and stays
        # apart; every later layer's w1 is one decision, and its w2 another.
        classes = [shared.group_class[g] for g in problem.arguments]
        w1s, w2s = classes[2:-1:2], classes[3:-1:2]
        assert len(set(w1s)) == 1 and len(set(w2s)) == 1 and w1s[0] != w2s[0]
        assert {classes[0], classes[1]}.isdisjoint({w1s[0], w2s[0]})
    # The untied problem grows by one layer's variables a layer; the tied one not at all: the ILP shrinks by
    # the number of layers less the first.
    layer = untied[3] - untied[2]
    assert layer > 0 and untied[4] - untied[3] == layer
    assert tied[2] == tied[3] == tied[4] < untied[2]
    assert untied[4] - tied[4] >= 2 * layer


def test_symmetric_tying_keeps_the_lp_bound_of_the_untied_problem():
    """The stable colour classes are an equitable partition: the tied LP's optimum is the untied LP's
    (both solved here), and on this stack the tied plan is the untied optimum."""
    problem = _problem_of(_stack(3, _grid()))
    shared = solve(problem, "ilp", tie=True)
    alone = solve(problem, "ilp", tie=False)
    assert shared.tied_by == ("symmetry",) and shared.bound_of_untied
    assert shared.untied_variables == problem.size and shared.variables < alone.variables
    assert shared.lp_bound == pytest.approx(alone.lp_bound, rel=TOL)
    assert shared.seconds == pytest.approx(alone.seconds, rel=TOL)
    assert evaluate(problem, shared.assignment)[0] == pytest.approx(shared.seconds, rel=TOL)


def test_where_symmetry_must_break_the_certified_gap_covers_what_tying_cost():
    """Three values, each op wanting its two on opposite candidates: all alike, tied to one choice, every
    op pays its reshard (6 s against the brute-force 4 s); the LP bound is still the untied problem's
    (3 s), so the certified gap (100%) covers the 50% tying cost."""
    problem = _frustrated_triangle()
    optimum = brute_force(problem)
    shared = solve(problem, "ilp", tie=True)
    assert shared.tied_by == ("symmetry",)
    assert shared.lp_bound == pytest.approx(solve(problem, "ilp", tie=False).lp_bound, rel=TOL)
    assert shared.seconds == pytest.approx(6.0) and optimum == pytest.approx(4.0)
    assert shared.certified_gap >= (shared.seconds - optimum) / optimum - TOL


# The oracle's own ring formulas (bytes moved per byte of result, latency steps), as step_time.py states them.
_RING = {"all-gather": (lambda n: (n - 1) / n, lambda n: n - 1), "reduce-scatter": (lambda n: n - 1, lambda n: n - 1),
         "all-reduce": (lambda n: 2 * (n - 1) / n, lambda n: 2 * (n - 1)),
         "all-to-all": (lambda n: (n - 1) / n, lambda n: n - 1), "collective-permute": (lambda n: 1.0, lambda n: 1)}
LAYERS, BATCH, WIDTH = 2, 512, 128
SAME_TIME = 0.01  # suggest's own rule: estimates within 1% are one time


def _residual_stack_step(ws, x):
    def loss(ws, x):
        for w in ws:
            h = x - x.mean(-1, keepdims=True)
            h = h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + 1e-5)
            x = x + jnp.tanh(h @ w)
        return (x * x).sum()

    return jax.tree.map(lambda w, g: w - 0.1 * g, ws, jax.grad(loss)(ws, x))


def _xla_objective(mesh, ws_specs, x_spec, spec) -> float:
    """The solver's objective (compute roofline plus ring collectives, on the solver's device figures)
    priced on XLA's figures: its cost analysis' FLOPs and bytes, and the collectives in its compiled text.
    The weights are state: they come back on the layout they came in on."""
    def arg(shape, p):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, p))

    compiled = jax.jit(_residual_stack_step, out_shardings=[NamedSharding(mesh, p) for p in ws_specs]).lower(
        [arg((WIDTH, WIDTH), p) for p in ws_specs], arg((BATCH, WIDTH), x_spec)).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    seconds = max(cost.get("flops", 0.0) / spec.peak("f32"), cost.get("bytes accessed", 0.0) / spec.hbm_bytes_per_s)
    for kind, nbytes, n, runs in collectives_per_step(compiled.as_text(), len(mesh.devices.flat)).values():
        moved, steps = _RING[kind]
        seconds += runs * (moved(n) * nbytes / spec.link_within_host + steps(n) * spec.latency_within_host)
    return seconds


def _pspec(sharding) -> P:
    """A solver sharding as a PartitionSpec, trailing unsharded dimensions dropped (P(None, None) is P())."""
    dims = [None if not axes else axes[0] if len(axes) == 1 else tuple(axes) for axes in sharding]
    while dims and dims[-1] is None:
        dims.pop()
    return P(*dims)


def test_the_tied_solve_picks_the_best_layout_xla_compiles():
    """Every layout of a 2-layer residual stack on 2 devices (each weight and the input replicated or
    split on either dimension: 27), compiled by XLA: the layout the tied solve picks, compiled, is the
    best of them by the solver's objective on XLA's figures, or within 1% of it."""
    mesh = _mesh((2,), ("d",))
    spec = Settings(devices=8).solver_device_spec
    options = [P(), P("d"), P(None, "d")]
    measured = {layout: _xla_objective(mesh, list(layout[:LAYERS]), layout[LAYERS], spec)
                for layout in itertools.product(options, repeat=LAYERS + 1)}
    best = min(measured.values())

    def arg(shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P()))

    problem = _problem_of(jax.jit(_residual_stack_step).lower([arg((WIDTH, WIDTH))] * LAYERS, arg((BATCH, WIDTH))))
    plan = solve(problem, "ilp", tie=True)
    assert plan.tied_by == ("symmetry",) and plan.variables < solve(problem, "ilp", tie=False).variables
    chosen = tuple(_pspec(problem.groups[g].candidates[plan.assignment.groups[g]]) for g in problem.arguments)
    assert measured[chosen] <= best * (1 + SAME_TIME), (chosen, measured[chosen], best)


@pytest.mark.parametrize("tied_by, says", [
    (["symmetry"], "tied by symmetry: the LP bound is the untied problem's"),
    (["symmetry", "repeats"], "tied by symmetry and as repeats: the LP bound is the tied problem's"),
    (["repeats"], "tied as repeats: the LP bound is the tied problem's"),
])
def test_the_solver_line_says_which_problem_the_lp_bound_bounds(tied_by, says):
    from jax_shard_lint.passes.models.suggest import SolverStats, SuggestReport
    from jax_shard_lint.reports.suggest.summary import solver_line

    stats = SolverStats(method="lp (integral)", variables=91_794, untied_variables=336_804, tied_by=tied_by,
                        value_groups=1_151, ops=1_224, objective_seconds=1.664, lower_bound_seconds=1.664, gap=0.0,
                        lp_bound_seconds=1.664, certified_gap=0.0, rounds=1)
    line = solver_line(SuggestReport.model_construct(solver=stats))
    assert f"91,794 variables (336,804 before repeated layers were {says})" in line
    assert "LP bound 1.66 s, certified gap 0%" in line
