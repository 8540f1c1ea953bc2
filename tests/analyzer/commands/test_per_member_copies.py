"""The buffers live at the peak that are a parameter once per member of a vmap, said so (newbie16 F6: 176 of a
diffrax ensemble step's 365.6 MiB were f32[256,512,256] and kin, each 256 members x a weight's per-device shape,
and the report's "produced by" said only transpose(jvp(vmap(jit(diffeqsolve))))).

The program: an ensemble's rollout vmapped with the weights closed over, whose backward pass is a loop of its
own (a custom VJP, as diffrax's checkpointed adjoint is). Under vmap that loop carries one weight gradient per
member. The oracles are XLA's and JAX's: the parameters' per-device shapes from the compiled input shardings,
the members from the ensemble's, and the per-member gradients in the compiled program's loop carry."""

import json
import os
import re
import sys

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from rich.console import Console

from jax_shard_lint.analyzer.testing import analyze
from jax_shard_lint.passes.models.report import LintReport
from jax_shard_lint.reports.findings.html import render_html
from jax_shard_lint.reports.findings.terminal import render_terminal

STEPS = 8


def _cell(params, h):
    return jnp.tanh(h @ params["w1"]) @ params["w2"]


@jax.custom_vjp
def _rollout(params, h):
    return jax.lax.fori_loop(0, STEPS, lambda i, h: h + _cell(params, h), h)


def _rollout_fwd(params, h):
    return _rollout(params, h), (params, h)


def _rollout_bwd(saved, g):
    params, h0 = saved
    states = jax.lax.scan(lambda h, _: (h + _cell(params, h), h), h0, None, length=STEPS)[1]

    def back(i, carry):
        g_h, g_params = carry
        _, vjp = jax.vjp(lambda p, h: h + _cell(p, h), params, states[STEPS - 1 - i])
        dp, dh = vjp(g_h)
        return dh, jax.tree.map(jnp.add, g_params, dp)
    g_h, g_params = jax.lax.fori_loop(0, STEPS, back, (g, jax.tree.map(jnp.zeros_like, params)))
    return g_params, g_h


_rollout.defvjp(_rollout_fwd, _rollout_bwd)


def _step(params, h0, targets):
    def loss(params):
        finals = jax.vmap(lambda h: _rollout(params, h))(h0)
        return jnp.mean((finals - targets) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value


def _lowered():
    mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:4])
    params = {"w1": jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P(None, "model"))),
              "w2": jax.ShapeDtypeStruct((256, 64), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))}
    h0 = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    return jax.jit(_step).lower(params, h0, h0), params, h0


def test_a_weight_gradient_per_member_is_named_after_the_weight():
    lowered, params, h0 = _lowered()
    compiled = lowered.compile()
    # XLA's and JAX's figures: each weight's shape on one device, the members one device holds, and the
    # backward loop's carry holding a gradient of w1's shape per member.
    w1 = tuple(compiled.input_shardings[0][0]["w1"].shard_shape(params["w1"].shape))
    w2 = tuple(compiled.input_shardings[0][0]["w2"].shard_shape(params["w2"].shape))
    members = compiled.input_shardings[0][1].shard_shape(h0.shape)[0]
    assert (w1, w2, members) == ((64, 128), (128, 64), 64)
    carried = f"f32[{members},{w1[0]},{w1[1]}]"
    assert re.search(rf"= \([^)]*{re.escape(carried)}[^)]*\) while\(", compiled.as_text()), carried

    report = analyze(lowered, "ensemble")
    live = {tuple(b.shape): b for b in report.memory.live_at_peak if b.shape is not None}
    marked = {shape: b.per_member_copy for shape, b in live.items() if b.per_member_copy is not None}
    # w1's gradient per member: 64 x [64,128] (read as the batch first or second, one answer).
    copy = marked[(members, *w1)]
    assert (copy.members, copy.parameters, str(copy)) == (
        members, ["params['w1']"], "64 x params['w1']'s per-device shape (a per-member copy from vmap)")
    assert live[(members, *w1)].bytes == members * w1[0] * w1[1] * 4
    # w2's, 64 x [128,64], is also [64,128] x 64: both weights named, neither guessed.
    assert marked[(members, *w2)].parameters == ["params['w1']", "params['w2']"]
    # The saved states [8 steps, 64 members, 64] are 8 x h0's per-device shape, but h0 is no parameter: not said.
    assert set(marked) == {(members, *w1), (members, *w2)}

    lint = LintReport(tool_version="0", jax_version=jax.__version__, jaxlib_version="0", script="ensemble.py",
                      command="lint", targets=[report], findings=[], rules=[])
    console = Console(width=250, record=True, file=open(os.devnull, "w"))
    render_terminal(lint, console)
    text = " ".join(console.export_text().split())
    assert "64 x params['w1']'s per-device shape (a per-member copy from vmap)" in text
    assert "2 buffers live at the peak (4.0 MiB) hold a parameter's per-device shape" in text
    [target] = json.loads(lint.model_dump_json())["targets"]
    assert {"members": 64, "dims": [0, 1], "parameters": ["params['w1']"]} in [
        b["per_member_copy"] for b in target["memory"]["live_at_peak"]]
    page = render_html(lint)
    assert "64 x params[&#x27;w1&#x27;]&#x27;s per-device shape (a per-member copy from vmap)" in page
    assert "2 buffers live at the peak (4.0 MiB) hold a parameter&#x27;s per-device shape" in page


def test_a_batched_model_keeps_no_copy_per_member():
    # The advice, measured here though not printed as a fix: the same rollout with the weights applied to the
    # whole batch (no vmap around the custom VJP) keeps one gradient; XLA's peak is lower and nothing is said.
    lowered, params, h0 = _lowered()
    batched = jax.jit(lambda p, h, t: jax.value_and_grad(
        lambda p: jnp.mean((_rollout(p, h) - t) ** 2))(p)).lower(params, h0, h0)

    def peak(c):
        m = c.memory_analysis()
        return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
    assert peak(batched.compile()) < peak(lowered.compile()) / 2
    report = analyze(batched, "batched")
    assert all(b.per_member_copy is None for b in report.memory.live_at_peak)


def test_a_forward_value_under_vmap_with_a_parameters_shape_and_one_dim_more_is_not_a_copy():
    # examples/value_function_step.py vmaps over states: its [16 states, 1024 grid, 16 choices] is 16 x V's
    # per-device [16,1024] by shape alone, but it is a forward value, no gradient: nothing is said.
    from conftest import EXAMPLES
    sys.path.insert(0, EXAMPLES)
    try:
        import value_function_step
    finally:
        sys.path.remove(EXAMPLES)
    lowered = value_function_step.shard_lint_targets(states=128, grid_points=1024, n_choices=16,
                                                     mesh_devices=jax.devices()[:8])["sharded_on_states"]
    report = analyze(lowered, "sharded_on_states")
    v = report.inputs[0]
    assert (v.path, v.shape, v.sharding) == ("v_next", [128, 1024], [["x"], []])
    shapes = [tuple(b.shape) for b in report.memory.live_at_peak if b.shape is not None]
    assert (16, 1024, 16) in shapes  # the shape alone would match
    assert all(b.per_member_copy is None for b in report.memory.live_at_peak)


BOX = 40.0


def _periodic_displacement(a, b):
    # jax_md's space.periodic: the difference wrapped into the box (its remainder is what vmap's backward adds).
    return jnp.mod(a - b + BOX * 0.5, BOX) - 0.5 * BOX


def _pair_energy(r):
    dr = jax.vmap(jax.vmap(_periodic_displacement, (None, 0)), (0, None))(r, r)
    r2 = jnp.sum(dr ** 2, axis=-1)
    r2 = jnp.where(r2 > 0, r2, 1.0)
    return 0.5 * jnp.sum(1.0 / r2 ** 6 - 1.0 / r2 ** 3)


def _md_step(r, v):
    v = v - 1e-3 * jax.grad(_pair_energy)(r)
    return r + 1e-3 * v, v


def test_a_pairwise_tensor_with_a_particles_shape_is_not_a_copy_per_member():
    # newbie19b F4: jax_md's all-pairs displacement vmap(vmap(displacement))(R, R) under grad. Its cotangent
    # f32[1024,128,3] (or [128,1024,3]) is 1024 x R's per-device [128,3] by shape, but it is the pair tensor:
    # XLA sums it over the particles on this device to R's shard and over all particles to R's whole shape (the
    # pair's two sides). No model, no gradient per member: nothing is said.
    mesh = jax.make_mesh((8,), ("p",), axis_types=(AxisType.Auto,), devices=jax.devices()[:8])
    particles = jax.ShapeDtypeStruct((1024, 3), jnp.float32, sharding=NamedSharding(mesh, P("p")))
    lowered = jax.jit(_md_step).lower(particles, particles)
    text = lowered.compile().as_text()
    # The pairs on this device first or second (jax 0.10 and 0.12 partition it either way).
    [(pairs, dims)] = re.findall(r"%(\S+) = f32\[(1024,128|128,1024),3\]\{[\d,]+\} fusion\([^\n]*op_name=\"[^\"]*"
                                 r"vmap\(vmap\([^\"]*add_any\"", text)
    sums = {m for m in re.findall(rf"= (f32\[\d+,3\])\{{1,0\}} fusion\(%{re.escape(pairs)}[,)]", text)}
    assert sums == {"f32[128,3]", "f32[1024,3]"}, sums  # summed over either side: a pair tensor

    report = analyze(lowered, "md")
    [live] = [b for b in report.memory.live_at_peak if b.name == pairs]
    # The shape alone would match: 1024 x R's per-device [128,3].
    assert (live.shape, live.bytes) == ([*map(int, dims.split(",")), 3], 1024 * 128 * 3 * 4)
    assert all(b.per_member_copy is None for b in report.memory.live_at_peak)
