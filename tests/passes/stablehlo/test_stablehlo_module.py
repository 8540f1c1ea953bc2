"""The lowered program's facts (passes/stablehlo/module.py, state_roundtrip.py)
against JAX's own view of the same jit: argument and result types from the
avals, shardings from the NamedShardings given, bytes per device from JAX's
``shard_shape``, and which output is which input from ``jax.tree_util`` paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.stablehlo.module import read_entry_signature
from jax_shard_lint.passes.stablehlo.state_roundtrip import correspond, mismatched, suggested_out_shardings


def _mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _signature(lowered):
    return read_entry_signature(jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered)))


def _train_step(state, batch):
    def loss(params):
        return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)

    grads = jax.grad(loss)(state["params"])
    params = jax.tree.map(lambda p, g: p - 0.1 * g, state["params"], grads)
    mu = jax.tree.map(lambda m, g: 0.9 * m + g, state["mu"], grads)
    return {"params": params, "mu": mu, "step": state["step"] + 1}, loss(state["params"])


def _abstract(mesh):
    def sds(shape, spec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    params = {"w": sds((64, 32), P("data", "model")), "b": sds((32,), P("model"))}
    state = {"params": params, "mu": dict(params), "step": sds((), P(), jnp.int32)}
    batch = {"x": sds((16, 64), P("data")), "y": sds((16, 32), P("data"))}
    return state, batch


def test_arguments_and_results_are_the_ones_jax_lowered():
    mesh = _mesh()
    state, batch = _abstract(mesh)
    lowered = jax.jit(_train_step, donate_argnums=0).lower(state, batch)
    sig = _signature(lowered)
    leaves = jax.tree_util.tree_leaves((state, batch))
    assert [tuple(t.shape) for t in sig.inputs] == [x.shape for x in leaves]
    assert [np.dtype(jnp.dtype(x.dtype)).name for x in leaves] == [
        {"f32": "float32", "s32": "int32"}[t.dtype] for t in sig.inputs]
    n_state = len(jax.tree_util.tree_leaves(state))
    assert [t.donated for t in sig.inputs] == [True] * n_state + [False] * (len(leaves) - n_state)
    assert sig.num_partitions == 8 and dict(sig.mesh.axes) == {"data": 4, "model": 2}
    for t, x in zip(sig.inputs, leaves):
        spec = x.sharding.spec
        expected = [[a] if isinstance(a, str) else list(a or []) for a in spec] + [[]] * (len(x.shape) - len(spec))
        assert t.sharding == expected, t.path
        shard = x.sharding.shard_shape(x.shape)
        assert t.per_device_bytes == int(np.prod(shard)) * jnp.dtype(x.dtype).itemsize, t.path
        assert t.bytes == int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
    out_leaves = jax.tree_util.tree_leaves(lowered.out_info)
    assert [tuple(t.shape) for t in sig.outputs] == [o.shape for o in out_leaves]


def test_every_state_output_is_paired_with_its_input_by_pytree_path():
    mesh = _mesh()
    state, batch = _abstract(mesh)
    lowered = jax.jit(_train_step).lower(state, batch)
    sig = _signature(lowered)
    in_paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path((state, batch))[0]]
    out_paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]]
    # The oracle: output [0]<path> is input [0]<path>; the loss ([1]) comes back as nothing.
    expected = {o: in_paths.index(p) for o, p in enumerate(out_paths) if p.startswith("[0]") and p in in_paths}
    assert {rt.output.index: rt.input.index for rt in correspond(sig)} == expected
    assert all(rt.matched_by == "path" for rt in correspond(sig))


def test_a_value_function_step_pairs_by_position():
    mesh = _mesh()
    v = jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    # {'V': V} -> V_next: no path in common, so the equal-typed output and input pair up by position.
    lowered = jax.jit(lambda s: jnp.maximum(s["V"], s["V"].mean(axis=0))).lower({"V": v})
    (rt,) = correspond(_signature(lowered))
    assert (rt.output.index, rt.input.index, rt.matched_by) == (0, 0, "position")


def test_a_state_that_comes_back_resharded_gets_the_out_shardings_that_pin_it():
    mesh = _mesh()
    w = jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    # out_shardings as the compiler would leave them after a transpose round trip: the oracle is
    # the sharding the lowering records for the result, which is the one given here.
    lowered = jax.jit(lambda s: {"w": s["w"] * 2}, out_shardings={"w": NamedSharding(mesh, P("model", "data"))}) \
        .lower({"w": w})
    sig = _signature(lowered)
    (rt,) = mismatched(correspond(sig))
    assert rt.output.sharding[:2] == [["model"], ["data"]] and rt.input.sharding == [["data"], ["model"]]
    text = suggested_out_shardings(sig.outputs, correspond(sig))
    assert text is not None
    fixed = eval(text.removeprefix("out_shardings="), {"NamedSharding": NamedSharding, "P": P, "mesh": mesh})  # noqa: S307
    again = _signature(jax.jit(lambda s: {"w": s["w"] * 2}, out_shardings=fixed).lower({"w": w}))
    assert mismatched(correspond(again)) == ()
