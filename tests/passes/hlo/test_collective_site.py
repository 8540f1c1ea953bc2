"""collective_site: every compiled collective is shown at the user's line that needs it, whichever
metadata the XLA release gave the collective (up to JAX 0.10 an inserted collective carried its
reader's; from 0.12 its operand's, or none for a parameter). Compiled by real XLA on the JAX this
runs on; the oracle is this file's own text."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from functools import partial
from math import prod

import jax
import jax.numpy as jnp
from conftest import FIXTURES, lint_targets
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.common.shapes import parse_arrays
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP
from jax_shard_lint.passes.stablehlo.module import read_entry_signature

MESH = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
OWNERSHIP = dataclasses.replace(DEFAULT_OWNERSHIP, user_roots=(os.path.dirname(os.path.abspath(__file__)),))


def _arg(shape, spec):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(MESH, spec))


def _collectives(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    sig = read_entry_signature(jax_adapter.stablehlo_module(lowered))
    hlo = parse_hlo_module(lowered.compile().as_text())
    return find_collectives(hlo, sig.mesh, None, OWNERSHIP).collectives


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _lines(collectives, kind):
    return {c.source.line if c.source else None for c in collectives if c.kind == kind}


def fsdp_matmul(x, w):
    h = jnp.tanh(x)
    return h @ w  # the weight is gathered for this product


def test_a_gathered_parameter_is_shown_at_the_op_that_reads_it():
    # The weight's all-gather has no frame of its own on JAX 0.12 (op_name="w").
    found = _collectives(fsdp_matmul, _arg((64, 128), P("fsdp", None)), _arg((128, 256), P("fsdp", "tp")))
    assert _lines(found, "all-gather") == {_line_of(fsdp_matmul, "h @ w")}


def stacked_layers(params, x):
    def layer(h, w):
        h = jnp.tanh(h @ w)  # each layer's weight is gathered for this product
        return h, None

    h, _ = jax.lax.scan(layer, x, params)
    return h.sum()


def test_a_scanned_parameter_is_shown_at_the_op_in_the_body_not_the_scan():
    # On 0.12 the gather of a scan's slice carries the slicing's metadata (the scan line).
    found = _collectives(stacked_layers, _arg((4, 128, 128), P(None, "fsdp", "tp")), _arg((64, 128), P("fsdp")))
    assert _lines(found, "all-gather") == {_line_of(stacked_layers, "h = jnp.tanh(h @ w)")}


def activation_reshard(x, w):
    h = jnp.sin(x)
    h = jax.lax.with_sharding_constraint(h, NamedSharding(MESH, P(None, "fsdp")))
    return jnp.cos(h) @ w  # reads h along the dimension the constraint sharded


def test_a_resharded_activation_is_shown_where_it_is_read_or_constrained():
    found = _collectives(activation_reshard, _arg((64, 128), P("fsdp")), _arg((128, 32), P()))
    allowed = {_line_of(activation_reshard, "with_sharding_constraint"), _line_of(activation_reshard, "jnp.cos(h) @ w")}
    moved = [c for c in found if c.kind in ("all-gather", "all-to-all", "collective-permute")]
    assert moved and {c.source.line for c in moved} <= allowed, [(c.kind, c.source) for c in moved]


def partial_sums(x, w):
    y = jnp.exp(x) @ w  # contracts the sharded dimension: each device holds a partial sum
    return y


def test_a_partial_sum_reduction_is_shown_at_the_op_that_made_the_sums():
    found = _collectives(partial_sums, _arg((64, 128), P(None, "fsdp")), _arg((128, 32), P("fsdp")))
    reductions = [c for c in found if c.kind in ("all-reduce", "reduce-scatter")]
    assert reductions and {c.source.line for c in reductions} == {_line_of(partial_sums, "jnp.exp(x) @ w")}


def explicit_collectives(x):
    @partial(jax.shard_map, mesh=MESH, in_specs=P("fsdp", "tp"), out_specs=P("fsdp", "tp"))
    def body(block):
        whole = jax.lax.all_gather(block, "fsdp", tiled=True)  # asked for by the program
        return jnp.tanh(whole[: block.shape[0]]) * 2

    return body(x)


def test_a_collective_the_program_asks_for_keeps_its_own_line():
    found = _collectives(explicit_collectives, _arg((64, 128), P("fsdp")))
    assert _lines(found, "all-gather") == {_line_of(explicit_collectives, "jax.lax.all_gather(block")}


def data_parallel_step(params, x):
    def loss(p):
        h = jnp.tanh(x @ p["w1"])  # w1's gradient is summed here
        out = h @ p["w2"]  # w2's gradient here
        return jnp.mean(out**2)  # and the loss here

    return jax.grad(loss)(params)


def test_a_combined_all_reduce_shows_each_gradient_at_its_own_line():
    """XLA's combiner joins the step's gradient all-reduces into one tuple all-reduce: each part keeps
    the line that computed its sums, and the parts are the tuple XLA compiled (its shapes, in order
    of size)."""
    params = {"w1": _arg((128, 256), P()), "w2": _arg((256, 64), P())}
    args = (params, _arg((64, 128), P("fsdp")))
    lowered = jax.jit(data_parallel_step).lower(*args)
    tuples = re.findall(r"= \(([^)]*)\) all-reduce\(", lowered.compile().as_text())
    found = [c for c in _collectives(data_parallel_step, *args) if c.kind == "all-reduce"]
    lines = {x.source.line for c in found for x in (c.parts or [c])}
    assert lines == {_line_of(data_parallel_step, text) for text in ('x @ p["w1"]', 'h @ p["w2"]')}
    combined = [c for c in found if c.parts]
    assert [[(p.dtype, p.shape) for p in c.parts] for c in combined] == [
        sorted(((a.dtype, list(a.dims)) for a in parse_arrays(text)), key=lambda a: -prod(a[1]))
        for text in tuples]
    assert tuples, "XLA no longer combines these all-reduces on this platform"


def tensor_parallel_grad(params, x):
    @partial(jax.shard_map, mesh=MESH, in_specs=(P("fsdp"), P(None, "tp")), out_specs=P("fsdp"))
    def block(h, w):
        return jax.lax.psum(jnp.tanh(h @ w) @ w.T, "tp")

    return jax.grad(lambda p: jnp.mean(block(x, p["w"]) ** 2))(params)


def test_every_collective_of_a_shard_map_step_is_counted():
    """XLA on CPU gives every collective of a shard_map step one channel id (the psum and the gradient
    all-reduce both say ``channel_id=1``): they are two collectives, not the pieces of one (the second was
    dropped). The oracle is the compiled text: one collective per instruction."""
    args = ({"w": _arg((128, 256), P(None, "tp"))}, _arg((64, 128), P("fsdp")))
    text = jax.jit(tensor_parallel_grad).lower(*args).compile().as_text()
    channels = re.findall(r" all-reduce(?:-start)?\(.*channel_id=(\d+)", text)
    assert len(channels) >= 2 and len(set(channels)) < len(channels), channels
    found = _collectives(tensor_parallel_grad, *args)
    assert [c.kind for c in found] == ["all-reduce"] * len(channels) and not any(c.pieces for c in found)
    psum = _line_of(tensor_parallel_grad, "jax.lax.psum(")
    assert [(c.mesh_axes, c.source.line) for c in found if c.mesh_axes == ["tp"]] == [(["tp"], psum)]


RING_SCRIPT = '''import jax
import jax.numpy as jnp
from functools import partial
from jax.sharding import NamedSharding, PartitionSpec as P


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("ring",), devices=mesh_devices, axis_types=(jax.sharding.AxisType.Auto,))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("ring"), out_specs=P("ring"))
    def ring(block):
        def hop(i, acc):
            return jax.lax.ppermute(acc, "ring", [(j, (j + 1) % 8) for j in range(8)]) + block
        total = jax.lax.psum(block.sum(), "ring")
        return jax.lax.fori_loop(0, 7, hop, block) / total

    x = jax.ShapeDtypeStruct((8 * 128, 256), jnp.float32, sharding=NamedSharding(mesh, P("ring")))
    return {"ring": jax.jit(ring).lower(x)}
'''


def test_a_collective_the_program_asks_for_is_explicit_not_a_finding(cli, tmp_path):
    """A ring of ppermutes in a shard_map (ring attention's pattern): the program's own traffic, shown at
    its line with intent "explicit"; SL101/SL102 are for collectives nobody asked for."""
    import json

    script = tmp_path / "ring.py"
    script.write_text(RING_SCRIPT)
    result = cli("lint", str(script), "--format", "json", "-q")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    permutes = [c for c in target["collectives"] if c["kind"] == "collective-permute"]
    line = RING_SCRIPT.splitlines().index(next(x for x in RING_SCRIPT.splitlines() if "ppermute" in x)) + 1
    assert permutes and all(c["intent"] == "explicit" and c["source"]["line"] == line for c in permutes)
    # XLA's compiled HLO has the psum as an all-reduce of a scalar: the program's own too, not partial sums.
    sums = [c for c in target["collectives"] if c["kind"] == "all-reduce"]
    assert [c["shape"] for c in sums] == [[]] and sums[0]["intent"] == "explicit"
    assert all(c["count"] == 7 for c in permutes)  # the loop's trip count
    assert not [f for f in target["findings"] if f["rule"] in ("SL101", "SL102")]


def test_collectives_at_a_shared_helper_name_the_caller_that_tells_them_apart(cli):
    """Both all-reduces are at the helper's ``x @ w``; each names the projection that called it."""
    path = os.path.join(FIXTURES, "scripts", "shared_helper.py")
    [t] = lint_targets(cli, path)
    with open(path) as f:
        lines = f.read().splitlines()
    line_of = {marker: next(i for i, text in enumerate(lines, 1) if marker in text)
               for marker in ("every projection's line", "the attention's projection", "the MLP's projection")}
    reductions = [c for c in t["collectives"] if c["kind"] == "all-reduce"]
    assert len(reductions) == 2
    assert {c["source"]["line"] for c in reductions} == {line_of["every projection's line"]}
    assert sorted(c["called_from"]["line"] for c in reductions) == sorted(
        [line_of["the attention's projection"], line_of["the MLP's projection"]])
