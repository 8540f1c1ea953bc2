"""suggest's problem builder (passes/solver/problem.py) on small lowered programs, against figures
computed here: a dot_general's FLOPs from its shapes and from XLA's cost_analysis(), a value's
candidates and an op's strategies enumerated from first principles (each mesh axis on one
dimension or factor or none, where the sizes divide), an op's compute divided by its
parallelism, and the problem's groups, ops, uses and memory terms read off the program."""

from __future__ import annotations

import itertools
from functools import partial
from math import prod

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.models.device_spec import DeviceSpec
from jax_shard_lint.passes.propagation.call_graph import flatten_call_graph
from jax_shard_lint.passes.propagation.sharding_graph import build_graph
from jax_shard_lint.passes.propagation.shardy_reference import with_sharding_rules
from jax_shard_lint.passes.solver.problem import (
    MAX_STRATEGIES,
    ProblemInput,
    _compute_seconds,
    _flops,
    _implied,
    _strategies,
    build_problem,
    tensor_candidates,
)
from jax_shard_lint.passes.stablehlo.loop_trips import entry_results

# One FLOP and one byte per second: seconds are FLOPs or bytes.
_UNIT = DeviceSpec("unit", "unit", (("f32", 1.0),), 1.0, 1.0, 0.5, 0.0, 0.0)
# A real device's peaks: a second here is far from a whole number.
_FAST = DeviceSpec("fast", "fast", (("f32", 1e14),), 2e12, 1e11, 2.5e10, 0.0, 0.0)
_SIZES = {"a": 2, "b": 4}


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _graph(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    ruled = with_sharding_rules(flatten_call_graph(jax_adapter.stablehlo_module(lowered)))
    return lowered, ruled, build_graph(ruled)


def _step(g, op):
    (step,) = [s for s in g.steps if s.op == op]
    return step


def _expected_candidates(shape, axes, sizes):
    """Each dimension a subset of the axes (in mesh order) whose product divides it, no axis twice."""
    subsets = [c for r in range(len(axes) + 1) for c in itertools.combinations(axes, r)]
    out = set()
    for per_dim in itertools.product(subsets, repeat=len(shape)):
        used = [a for s in per_dim for a in s]
        if len(used) == len(set(used)) and all(n % prod(sizes[a] for a in s) == 0 for n, s in zip(shape, per_dim)):
            out.add(per_dim)
    return out


@pytest.mark.parametrize("shape", [(8, 6), (2, 3), (4,), (6, 2, 4), (3, 5)], ids=str)
def test_tensor_candidates_are_every_dividing_placement(shape):
    got = tensor_candidates(shape, ("a", "b"), _SIZES)
    expected = _expected_candidates(shape, ("a", "b"), _SIZES)
    assert len(got) == len(set(got)) == len(expected)
    assert set(got) == expected
    assert got[0] == ((),) * len(shape)  # the replicated one first


def test_a_dot_generals_flops_are_2mnk_and_xlas():
    m, k, n = 16, 32, 64
    lowered, _, g = _graph(lambda x, w: x @ w, _f32(m, k), _f32(k, n))
    cost = lowered.compile().cost_analysis()
    xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
    assert _flops(_step(g, "stablehlo.dot_general"), g) == 2 * m * n * k == xla


def test_an_elementwise_ops_flops_are_its_elements_and_xlas():
    lowered, _, g = _graph(lambda x, y: x + y, _f32(16, 24), _f32(16, 24))
    cost = lowered.compile().cost_analysis()
    xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
    assert _flops(_step(g, "stablehlo.add"), g) == 16 * 24 == xla


def _expected_strategies(factor_sizes, axes, sizes):
    """Each axis on one factor of size > 1 or none, a factor's axes dividing it."""
    out = set()
    for placement in itertools.product([None] + [f for f, n in enumerate(factor_sizes) if n > 1], repeat=len(axes)):
        per = tuple(tuple(a for a, p in zip(axes, placement) if p == f) for f in range(len(factor_sizes)))
        if all(n % prod(sizes[a] for a in s) == 0 for n, s in zip(factor_sizes, per)):
            out.add(per)
    return out


def test_a_dots_strategies_put_each_axis_on_m_n_k_or_none():
    # M = 2 takes a (2) but not b (4); N = 12 takes either but not both; K = 8 takes both.
    m, k, n = 2, 8, 12
    _, _, g = _graph(lambda x, w: x @ w, _f32(m, k), _f32(k, n))
    step = _step(g, "stablehlo.dot_general")
    assert sorted(step.rule.factor_sizes) == sorted((m, k, n))
    got = _strategies(step, ("a", "b"), _SIZES)
    assert len(got) == len(set(got))
    assert set(got) == _expected_strategies(step.rule.factor_sizes, ("a", "b"), _SIZES)
    assert got[0] == ((),) * 3  # the replicated one first
    # Each factor's dimension read from the shapes: x is (M, K), w (K, N), the result (M, N).
    fm, fk, fn = (step.rule.factor_sizes.index(s) for s in (m, k, n))
    assert set(step.rule.reduction) == {fk}
    per = tuple(("a",) if f == fm else ("b",) if f == fk else () for f in range(3))
    assert _implied(step, 0, per) == (("a",), ("b",))
    assert _implied(step, 1, per) == (("b",), ())
    assert _implied(step, 2, per) == (("a",), ())
    assert fn not in (fm, fk)


def test_an_elementwise_ops_strategies_are_its_dims_candidates():
    _, _, g = _graph(lambda x, y: x * y, _f32(2, 12), _f32(2, 12))
    step = _step(g, "stablehlo.multiply")
    got = _strategies(step, ("a", "b"), _SIZES)
    assert len(got) == len(set(got)) == len(_expected_candidates((2, 12), ("a", "b"), _SIZES))
    assert {tuple(_implied(step, 2, per)) for per in got} == _expected_candidates((2, 12), ("a", "b"), _SIZES)


def test_a_five_factor_dot_on_three_axes_keeps_the_replicated_and_the_most_parallel():
    _, _, g = _graph(lambda x, w: jnp.einsum("bhmk,bhkn->bhmn", x, w), _f32(8, 8, 8, 8), _f32(8, 8, 8, 8))
    step = _step(g, "stablehlo.dot_general")
    sizes = {"p": 2, "q": 2, "r": 2}
    assert len(_expected_strategies(step.rule.factor_sizes, tuple(sizes), sizes)) == 6 ** 3 > MAX_STRATEGIES
    got = _strategies(step, tuple(sizes), sizes)
    assert len(got) == MAX_STRATEGIES == len(set(got))
    assert got[0] == ((),) * 5
    assert all(prod(sizes[a] for s in per for a in s) == 8 for per in got[1:])


def test_compute_seconds_divide_by_the_axes_on_the_factors():
    m, k, n = 16, 32, 64
    _, _, g = _graph(lambda x, w: x @ w, _f32(m, k), _f32(k, n))
    step = _step(g, "stablehlo.dot_general")
    fm, fk, _ = (step.rule.factor_sizes.index(s) for s in (m, k, n))
    replicated = ((),) * 3
    assert _compute_seconds(step, g, replicated, _SIZES, _UNIT, 0) == 2 * m * n * k
    on_m = tuple(("a",) if f == fm else () for f in range(3))
    assert _compute_seconds(step, g, on_m, _SIZES, _UNIT, 0) == 2 * m * n * k / 2
    both = tuple(("a",) if f == fm else ("b",) if f == fk else () for f in range(3))
    assert _compute_seconds(step, g, both, _SIZES, _UNIT, 0) == 2 * m * n * k / 8
    # Memory-bound: the bytes moved over HBM bandwidth, divided likewise.
    moved = 10 * 2 * m * n * k
    assert _compute_seconds(step, g, both, _SIZES, _UNIT, moved) == moved / 8
    # On a real device's peaks (FLOPs per second and bytes per second apart), each over its own peak.
    assert _compute_seconds(step, g, both, _SIZES, _FAST, 10**9) == pytest.approx(10**9 / 2e12 / 8)
    assert _compute_seconds(step, g, both, _SIZES, _FAST, 0) == pytest.approx(2 * m * n * k / 1e14 / 8)


def _problem(fn, *args, spec=_UNIT):
    _, ruled, g = _graph(fn, *args)
    arguments = tuple(t for t, f in g.function_args if f == g.entry)
    results = tuple(entry_results(ruled, g.value_ids))
    inp = ProblemInput(free_axes=("a", "b"), axis_sizes=dict(_SIZES), spec=spec, repeats={}, arguments=arguments,
                       results=results, argument_paths=tuple(f"args[{i}]" for i in range(len(arguments))),
                       result_paths=tuple(f"result[{i}]" for i in range(len(results))), pinned={}, ties=(),
                       result_donated=(False,) * len(results), budget_bytes=None)
    return g, inp, build_problem(g, inp)


def _scaled_mlp(x, y, w):
    return x, (x * y) @ w


def test_the_problem_of_a_scaled_matmul():
    shapes = ((16, 32), (16, 32), (32, 64))
    g, inp, problem = _problem(_scaled_mlp, *(_f32(*s) for s in shapes), spec=_FAST)
    x, y, w = inp.arguments
    group_of = {t: grp.id for grp in problem.groups for t in grp.tensors}
    # x, y and x * y have one shape and the multiply maps them one to one: one group; w and the
    # matmul's result their own.
    assert group_of[x] == group_of[y]
    assert len({group_of[x], group_of[w], group_of[inp.results[1]]}) == 3
    for grp in problem.groups:
        assert set(grp.candidates) == _expected_candidates(grp.shape, ("a", "b"), _SIZES)
    # The multiply is priced on its group: its bytes over HBM, divided by each candidate's parallelism.
    xy = problem.groups[group_of[x]]
    replicated = xy.unary[xy.candidates.index(((), ()))]
    assert 0 < replicated <= 3 * 16 * 32 * 4 / _FAST.hbm_bytes_per_s
    for c, seconds in zip(xy.candidates, xy.unary):
        assert seconds == pytest.approx(replicated / prod(_SIZES[a] for d in c for a in d))
    # The matmul is the one op that chooses: its strategies, the operands then the result as uses.
    (op,) = problem.ops
    dot = _step(g, "stablehlo.dot_general")
    assert op.op == "stablehlo.dot_general"
    assert set(op.strategies) == _expected_strategies(dot.rule.factor_sizes, ("a", "b"), _SIZES)
    assert [u.is_result for u in op.uses] == [False, False, True]
    flops = 2 * 16 * 32 * 64
    for per, seconds, reduction in zip(op.strategies, op.seconds, op.reduce_seconds):
        parallel = prod(_SIZES[a] for s in per for a in s)
        assert seconds - reduction >= flops / _FAST.peak("f32") / parallel * (1 - 1e-9)
        assert (reduction > 0) == any(per[f] for f in dot.rule.reduction)
    # Memory: the three arguments and the matmul's result; x comes back as it is, no second copy.
    assert [t.path for t in problem.memory] == ["args[0]", "args[1]", "args[2]", "result[1]"]


def test_a_shard_maps_global_side_never_gains_its_manual_axes():
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto, AxisType.Auto))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("b"), out_specs=P("b"), axis_names={"b"})
    def body(x):
        return x * 2

    g, _, problem = _problem(lambda x: jnp.tanh(body(x)), _f32(16, 8))
    group_of = {t: grp.id for grp in problem.groups for t in grp.tensors}
    boundaries = [s for s in g.steps if s.manual_axes is not None]
    assert boundaries
    for step in boundaries:
        outer = problem.groups[group_of[step.tensors[0]]]
        # Only 'a' is free to place on the global side: 'b' is the shard_map's, as written.
        assert set(outer.candidates) == _expected_candidates(outer.shape, ("a",), _SIZES)
