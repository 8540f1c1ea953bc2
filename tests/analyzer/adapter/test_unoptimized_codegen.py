"""A fix candidate compiles with its CPU machine code unoptimized (analyzer/adapter/compiling.py,
``optimize_machine_code=False``): XLA's HLO passes, SPMD partitioning and buffer assignment run before
LLVM, so the figures a fix check compares are the same. The oracle is JAX's own ``lower().compile()``
of the same step at XLA's default level: its ``memory_analysis()`` and the collectives of its compiled
text (tests/hlo_oracle.py), against the same read from the unoptimized compile."""

import jax
import jax.numpy as jnp
from hlo_oracle import compiled_collectives
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter


def _memory(stats):
    return (stats.argument_size_in_bytes, stats.output_size_in_bytes, stats.temp_size_in_bytes,
            stats.alias_size_in_bytes)


def test_unoptimized_machine_code_keeps_xlas_memory_figures_and_collectives():
    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def loss(params, x):
        def layer(h, w):
            return jnp.tanh(h @ w["up"]) @ w["down"], None

        h, _ = jax.lax.scan(layer, x, params)
        return jnp.mean(h ** 2)

    @jax.jit
    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    def weight(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    params = {"up": weight((4, 256, 512), P(None, "fsdp", "tp")), "down": weight((4, 512, 256), P(None, "tp", "fsdp"))}
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
    lowered = step.lower(params, x)
    default = lowered.compile()

    text = jax_adapter.stablehlo_text(lowered)
    sig_devices = jax_adapter.device_assignment(lowered)
    program = jax_adapter.compile_stablehlo_text(text, 8, devices=sig_devices, with_reports=False,
                                                 optimize_machine_code=False)

    assert _memory(program.compiled.get_compiled_memory_stats()) == _memory(default.memory_analysis())
    collectives = compiled_collectives(default.as_text(), 8)
    assert collectives  # the step gathers and reduces: the comparison is not of two empty sets
    assert sorted(compiled_collectives(program.hlo_text, 8).values()) == sorted(collectives.values())


def test_lints_own_compile_unoptimized_writes_the_same_buffer_assignment_and_live_ranges():
    """lint's own compile of a jitted target (compile_lowered, XLA's dumps read back) at -O0: the
    buffer-assignment and live-range reports XLA writes are the text the optimized compile writes."""
    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    @jax.jit
    def step(w, x):
        return jnp.tanh(x @ w) @ w.T

    w = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", "tp")))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
    lowered = step.lower(w, x)
    optimized = jax_adapter.compile_lowered(lowered)
    unoptimized = jax_adapter.compile_lowered(lowered, optimize_machine_code=False)
    assert optimized.buffer_assignment_text and optimized.live_range_text
    assert unoptimized.buffer_assignment_text == optimized.buffer_assignment_text
    assert unoptimized.live_range_text == optimized.live_range_text
    assert unoptimized.memory == optimized.memory
    assert unoptimized.hlo_text == optimized.hlo_text
