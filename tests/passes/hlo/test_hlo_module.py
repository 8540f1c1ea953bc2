"""The HLO parser (passes/hlo/parser.py, module.py) against XLA's own parsed module:
the executable's ``hlo_modules()`` gives every computation, instruction, opcode,
operand and user as XLA sees them; our parse of the same program's text must
agree on each."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.hlo.parser import parse_hlo_module


def _opcode_text(opcode) -> str:
    """XLA's enum name (``HloOpcode.kAllGatherStart``) as HLO text spells it (``all-gather-start``)."""
    name = str(opcode).rsplit(".", 1)[-1].removeprefix("k")
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


# parameter(0) and constant(1) hold a literal, not operands (the parser keeps it as text: the
# parameter's number is read from it).
_LITERAL_IN_PARENTHESES = frozenset({"parameter", "constant"})


def _mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _train_step(params, x):
    def loss(params):
        h = x
        for w in params:
            h = jnp.tanh(h @ w)
        return (h ** 2).mean()

    grads = jax.grad(loss)(params)
    return [w - 0.1 * g for w, g in zip(params, grads)]


def _scan_step(h, ws):
    return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), h, ws)[0].sum(axis=0)


def _programs():
    mesh = _mesh()
    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct((64, 64), f32, sharding=NamedSharding(mesh, P(None, "model")))] * 3
    x = jax.ShapeDtypeStruct((32, 64), f32, sharding=NamedSharding(mesh, P("data", None)))
    h = jax.ShapeDtypeStruct((32, 16), f32, sharding=NamedSharding(mesh, P("data", None)))
    ws = jax.ShapeDtypeStruct((6, 16, 16), f32, sharding=NamedSharding(mesh, P(None, None, "model")))
    return {
        "train step with collectives": jax.jit(_train_step).lower(params, x).compile(),
        "scan (a while loop)": jax.jit(_scan_step).lower(h, ws).compile(),
        "sort and a custom comparator": jax.jit(lambda v: jnp.sort(v, axis=-1)).lower(np.ones((4, 8), np.float32))
        .compile(),
    }


PROGRAMS = _programs()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_computation_and_instruction_is_the_one_xla_has(name):
    compiled = PROGRAMS[name]
    (xla_module,) = compiled.runtime_executable().hlo_modules()
    ours = parse_hlo_module(compiled.as_text())
    xla = {c.name: c for c in xla_module.computations()}
    assert set(ours.computations) == set(xla)
    for comp_name, comp in ours.computations.items():
        # XLA lists a computation's instructions in post order; the text, in its own order.
        theirs = {i.name: i for i in xla[comp_name].instructions()}
        assert {i.name: i.opcode for i in comp.instructions} == {n: _opcode_text(i.opcode) for n, i in theirs.items()}
        for mine in comp.instructions:
            if mine.opcode in _LITERAL_IN_PARENTHESES:
                continue
            assert list(mine.operands) == [o.name for o in theirs[mine.name].operands()], mine.name


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_users_are_xlas_users(name):
    compiled = PROGRAMS[name]
    (xla_module,) = compiled.runtime_executable().hlo_modules()
    ours = parse_hlo_module(compiled.as_text())
    users = ours.users()
    for comp in xla_module.computations():
        for xi in comp.instructions():
            # XLA lists a user once however many of its operands the value is.
            assert {u.name for u in users.get(xi.name, [])} == {u.name for u in xi.users()}, xi.name


def test_entry_and_partitions_are_the_compiled_programs():
    compiled = PROGRAMS["train step with collectives"]
    ours = parse_hlo_module(compiled.as_text())
    # XLA's entry computation is the one the executable's parameters belong to: the only one whose
    # parameters' count is the program's argument count (3 weights and the batch).
    params = [i for i in ours.entry_computation.instructions if i.opcode == "parameter"]
    assert len(params) == 4
    assert ours.num_partitions == 8
    collectives = {i.opcode for c in ours.computations.values() for i in c.instructions}
    assert collectives & {"all-reduce", "all-gather", "reduce-scatter", "all-reduce-start"}


def test_a_while_loops_trip_count_is_the_scans_length():
    ours = parse_hlo_module(PROGRAMS["scan (a while loop)"].as_text())
    loops = [i for c in ours.computations.values() for i in c.instructions if i.opcode == "while"]
    assert [i.known_trip_count() for i in loops] == [6]
    called = {kind for i in loops for kind, _ in i.called()}
    assert {"condition", "body"} <= called


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_computation_but_the_entry_is_called_by_an_instruction(name):
    # XLA drops computations nothing calls, so the calls we read must reach every other one.
    compiled = PROGRAMS[name]
    (xla_module,) = compiled.runtime_executable().hlo_modules()
    ours = parse_hlo_module(compiled.as_text())
    called = {target for c in ours.computations.values() for i in c.instructions for _, target in i.called()}
    assert called == {c.name for c in xla_module.computations()} - {ours.entry}
