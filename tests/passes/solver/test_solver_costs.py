"""The solver's cost terms (passes/solver/sharding_problem.py) against XLA: a tensor's bytes per device
on a sharding against memory_analysis() of a parameter placed so, and a reshard's seconds against the
ring formula over the collectives XLA compiles for that reshard (kind, bytes and group read from
compiled.as_text()). And the assignment's total: its seconds are its compute, reductions and
reshards, its memory the bytes of the candidates it chose."""

import itertools

import jax
import jax.numpy as jnp
import pytest
from hlo_oracle import compiled_collectives
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.models.device_spec import DeviceSpec
from jax_shard_lint.passes.solver.sharding_problem import (
    Assignment,
    MemoryTerm,
    OpChoice,
    ShardingProblem,
    Use,
    ValueGroup,
    breakdown,
    evaluate,
    local_bytes,
    reshard_seconds,
)

_SIZES = {"x": 2, "y": 4}
_SHAPE = (64, 256)
# One byte per second within a host, half that across hosts, no latency: seconds are ring bytes.
_UNIT = DeviceSpec("unit", "unit", (("f32", 1.0),), 1.0, 1.0, 0.5, 0.0, 0.0)
_RING = {"all-gather": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n}


def _sharding(spec: P) -> tuple[tuple[str, ...], ...]:
    dims = [() if d is None else (d,) if isinstance(d, str) else tuple(d) for d in spec]
    return tuple(dims + [()] * (len(_SHAPE) - len(dims)))


def _mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))


@pytest.mark.parametrize("spec", [P(), P("x"), P(None, "y"), P("y", "x"), P(("x", "y"))], ids=str)
def test_local_bytes_are_xlas_argument_bytes(spec):
    value = jax.ShapeDtypeStruct(_SHAPE, jnp.float32, sharding=NamedSharding(_mesh(), spec))
    m = jax.jit(lambda v: v).lower(value).compile().memory_analysis()
    assert local_bytes(_SHAPE, "f32", _sharding(spec), _SIZES) == m.argument_size_in_bytes


@pytest.mark.parametrize("src, dst", [
    (P("x", "y"), P(None, "y")),  # an all-gather over x
    (P(("x", "y"), None), P()),  # an all-gather over both
    (P("x", None), P(None, "x")),  # an all-to-all over x
], ids=str)
def test_reshard_seconds_are_the_ring_over_xlas_collectives(src, dst):
    # Kills an all-to-all or all-gather left out (the moved/dropped tests turned), its group or bytes
    # wrong, and the all-gather timed on the link across hosts.
    value = jax.ShapeDtypeStruct(_SHAPE, jnp.float32, sharding=NamedSharding(_mesh(), src))
    text = jax.jit(lambda v: v * 2, out_shardings=NamedSharding(_mesh(), dst)).lower(value).compile().as_text()
    compiled = list(compiled_collectives(text, 8).values())
    assert len(compiled) == 1, compiled  # one collective: the model's order of two is not in question
    kind, nbytes, n = compiled[0]
    expected = _RING[kind](n) * nbytes / _UNIT.link_within_host
    assert reshard_seconds(_SHAPE, "f32", _sharding(src), _sharding(dst), _SIZES, _UNIT) == pytest.approx(expected)
    assert reshard_seconds(_SHAPE, "f32", _sharding(src), _sharding(src), _SIZES, _UNIT) == 0


def _problem() -> ShardingProblem:
    """Two value groups of two candidates each, one op of two strategies reading both."""
    a, b = (("x",), ()), ((), ("x",))
    groups = (ValueGroup(0, (0,), _SHAPE, "f32", (a, b), (1.0, 2.0)),
              ValueGroup(1, (1,), _SHAPE, "f32", (a, b), (4.0, 8.0)))
    uses = (Use(0, False, (0, 1), (a, b), ((0.0, 16.0), (32.0, 0.0))),
            Use(1, True, (1, 0), (a, b), ((0.0, 64.0), (128.0, 0.0))))
    op = OpChoice(0, "dot", ((("x",),), ((),)), (256.0, 512.0), (256.0, 0.0), uses, 1)
    memory = (MemoryTerm(0, "args[0]", (1000, 2000)), MemoryTerm(1, "result", (4000, 8000)))
    return ShardingProblem(_SIZES, ("x",), groups, (op,), memory, None, (), (0,), (1,))


def test_an_assignments_seconds_are_its_compute_reductions_and_reshards():
    # Kills the op's terms left out of the total, a breakdown started at 1 rather than 0, and the
    # reductions divided out of compute rather than subtracted: every assignment, summed by hand.
    problem = _problem()
    for g0, g1, s in itertools.product((0, 1), (0, 1), (0, 1)):
        a = Assignment((g0, g1), (s,))
        op = problem.ops[0]
        unary = problem.groups[0].unary[g0] + problem.groups[1].unary[g1]
        reshard = op.uses[0].seconds[op.uses[0].wanted[s]][g0] + op.uses[1].seconds[op.uses[1].wanted[s]][g1]
        seconds, memory = evaluate(problem, a)
        assert seconds == unary + op.seconds[s] + reshard
        assert memory == problem.memory[0].bytes[g0] + problem.memory[1].bytes[g1]
        assert breakdown(problem, a) == (unary + op.seconds[s] - op.reduce_seconds[s], op.reduce_seconds[s], reshard)
