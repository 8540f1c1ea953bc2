"""collective_origin: which input a compiled collective moves (by operand identity in
XLA's HLO), why it runs (the op that reads along a sharded dimension, at the user's
line) and which outputs depend on it. The oracles are outside the pass: JAX's own
pytree key paths for the input, this file's text for the line, and outputs that
depend on the collective by construction."""

from __future__ import annotations

import dataclasses
import inspect
import os

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.hlo.collective_origin import collective_origins, outputs_depending_on
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP
from jax_shard_lint.passes.stablehlo.module import read_entry_signature

MESH = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
OWNERSHIP = dataclasses.replace(DEFAULT_OWNERSHIP, user_roots=(os.path.dirname(os.path.abspath(__file__)),))


def _arg(shape, spec, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(MESH, spec))


def gathers_a_parameter(params, x):
    w = jax.lax.with_sharding_constraint(params["w"], NamedSharding(MESH, P()))
    return x @ w, x * 2


def looks_up_rows(table, ids):
    return table[ids] * 2, ids + 1


def _analysed(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    module = jax_adapter.stablehlo_module(lowered)
    sig = read_entry_signature(module)
    hlo = parse_hlo_module(lowered.compile().as_text())
    collectives = find_collectives(hlo, sig.mesh, None, OWNERSHIP).collectives
    return hlo, collective_origins(hlo, collectives, sig.inputs, OWNERSHIP)


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_an_all_gather_names_the_input_it_moves():
    params = {"w": _arg((64, 32), P("x", None)), "b": _arg((32,), P())}
    hlo, collectives = _analysed(gathers_a_parameter, params, _arg((16, 64), P()))
    (gather,) = [c for c in collectives if c.kind == "all-gather"]
    # JAX's own name for the leaf: the argument's name and tree_util's key path.
    (w_key,) = [p for p, leaf in jax.tree_util.tree_flatten_with_path(params)[0] if leaf is params["w"]]
    assert gather.input_path == "params" + jax.tree_util.keystr(w_key)
    assert gather.why.startswith(f"XLA all-gathers the whole of {gather.input_path} P('x') over x")
    # The matmul's output depends on the gather; the other output does not.
    assert outputs_depending_on(hlo, [gather.hlo_name]) == {0: [gather.hlo_name]}


def test_a_gather_from_a_sharded_table_is_explained_at_its_line():
    hlo, collectives = _analysed(looks_up_rows, _arg((1024, 16), P("x", None)), jax.ShapeDtypeStruct((8,), jnp.int32))
    (reduce,) = collectives
    assert reduce.kind == "all-reduce"
    where = f"{os.path.abspath(__file__)}:{_line_of(looks_up_rows, 'table[ids]')}"
    assert f"the gather at {where} reads table P('x') along dimension 0, which is sharded on x" in reduce.why
    assert outputs_depending_on(hlo, [reduce.hlo_name]) == {0: [reduce.hlo_name]}
