"""function_boundaries: Shardy's export at function boundaries (a call's results keep
only the part of their sharding that divides their shape) against Shardy's own
pipeline on a JAX program with a nested jit, and ``evenly_sharded`` against a brute
force over every major part of a dimension's axes."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.common.axes import size_of
from jax_shard_lint.passes.propagation.function_boundaries import evenly_sharded
from jax_shard_lint.passes.propagation.report import agreement, run_propagation
from jax_shard_lint.passes.propagation.shardy_reference import shardy_propagated

MESH = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


@jax.jit
def _first_six_rows(a):
    return jnp.tanh(a)[:6]  # 6 rows over x=4: only x's major 2 divides them


def _calls_a_function(a):
    return jax.lax.with_sharding_constraint(_first_six_rows(a) * 2, NamedSharding(MESH, P("x", None)))


def test_a_call_result_keeps_what_divides_as_shardy_does():
    arg = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(MESH, P("x", "y")))
    module = jax_adapter.stablehlo_module(jax.jit(_calls_a_function).lower(arg))
    shardy = str(shardy_propagated(module))
    call = next(line for line in shardy.splitlines() if "call @" in line)
    assert '[{"x":(1)2}, {"y"}]' in call  # the program exercises the export
    result = agreement(run_propagation(module), module)
    assert result.compared == result.reported > 0
    assert result.agreeing == result.compared, [(d.value, d.ours, d.shardy) for d in result.disagreements]
    graph = run_propagation(module).graph
    assert [graph.tensors[t].dims for t in graph.call_results] == [[(("x", 1, 2),), (("y", 1, 2),)]]


def _brute_force(axes, dim_size):
    """The largest major part of ``axes`` (whole axes, then a sub-axis of the next one)
    whose size divides ``dim_size``."""
    best = ()
    for i in range(len(axes) + 1):
        whole = tuple(axes[:i])
        options = [whole]
        if i < len(axes):
            name, pre, size = axes[i]
            options += [whole + ((name, pre, part),) for part in range(2, size) if size % part == 0]
        for option in options:
            if dim_size % size_of(option) == 0 and size_of(option) > size_of(best):
                best = option
    return best


def test_evenly_sharded_is_the_largest_dividing_major_part():
    axes_pool = [("a", 1, 4), ("b", 1, 2), ("c", 1, 8), ("d", 1, 6)]
    for n in range(3):
        for axes in itertools.permutations(axes_pool, n):
            for dim_size in range(1, 50):
                assert evenly_sharded(axes, dim_size) == _brute_force(axes, dim_size), (axes, dim_size)
