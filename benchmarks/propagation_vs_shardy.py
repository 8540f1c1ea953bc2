"""Our sharding propagation against Shardy's on the same module, in one run:
a 24-layer transformer training step (layers unrolled, attention + MLP, FSDP x
TP), lowered once.

    python benchmarks/propagation_vs_shardy.py [--layers 24] [--repeat 5]

Ours = Shardy's rule population (our input) + building the graph + propagating;
Shardy = ``sdy-propagation-pipeline`` on a clone. Both start from the parsed
module; the clone each side makes is included in its time. Prints the median
of each part and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def transformer_step(layers: int, d: int = 512, heads: int = 8, seq: int = 256, batch: int = 16):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)

    def spec(shape, pspec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, pspec))

    def block(h, w):
        x = h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)
        q, k, v = (jnp.einsum("bsd,dhk->bshk", x, w[n]) for n in ("q", "k", "v"))
        att = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, k) / 8.0, axis=-1)
        h = h + jnp.einsum("bhst,bthk,hkd->bsd", att, v, w["o"])
        return h + jax.nn.gelu(h @ w["up"]) @ w["down"]

    def loss(params, x):
        h = x
        for w in params:
            h = block(h, w)
        return jnp.mean(h * h)

    def step(params, x):
        g = jax.grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, g)

    hk = d // heads
    layer = {
        "q": spec((d, heads, hk), P("fsdp", "tp")), "k": spec((d, heads, hk), P("fsdp", "tp")),
        "v": spec((d, heads, hk), P("fsdp", "tp")), "o": spec((heads, hk, d), P("tp", None, "fsdp")),
        "up": spec((d, 4 * d), P("fsdp", "tp")), "down": spec((4 * d, d), P("tp", "fsdp")),
    }
    return jax.jit(step).lower([dict(layer) for _ in range(layers)], spec((batch, seq, d), P("fsdp")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 8)
    from jax_shard_lint.analyzer.adapter import jax_adapter
    from jax_shard_lint.passes.propagation.propagate import propagate
    from jax_shard_lint.passes.propagation.report import agreement, run_propagation
    from jax_shard_lint.passes.propagation.sharding_graph import build_graph
    from jax_shard_lint.passes.propagation.shardy_reference import shardy_propagated, with_sharding_rules

    module = jax_adapter.parse_stablehlo(transformer_step(args.layers).as_text(debug_info=True))
    n_lines = str(module).count("\n")
    parts = {"rules": [], "graph": [], "propagate": [], "ours": [], "shardy": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ruled = with_sharding_rules(module)
        t1 = time.perf_counter()
        graph = build_graph(ruled)
        t2 = time.perf_counter()
        propagate(graph)
        t3 = time.perf_counter()
        shardy_propagated(module)
        t4 = time.perf_counter()
        parts["rules"].append(t1 - t0)
        parts["graph"].append(t2 - t1)
        parts["propagate"].append(t3 - t2)
        parts["ours"].append(t3 - t0)
        parts["shardy"].append(t4 - t3)
    med = {k: statistics.median(v) for k, v in parts.items()}
    agree = agreement(run_propagation(module), module)
    print(f"jax {jax.__version__}; {args.layers}-layer transformer training step, {n_lines} lines of StableHLO, "
          f"{len(graph.steps)} steps, {len(graph.tensors)} tensors; median of {args.repeat}")
    print(f"  ours:   {med['ours'] * 1000:8.1f} ms  (Shardy rule population {med['rules'] * 1000:.1f} ms, "
          f"graph build {med['graph'] * 1000:.1f} ms, propagation {med['propagate'] * 1000:.1f} ms)")
    print(f"  Shardy: {med['shardy'] * 1000:8.1f} ms  (sdy-propagation-pipeline)")
    print(f"  ratio ours / Shardy: {med['ours'] / med['shardy']:.2f}x")
    print(f"  agreement with Shardy: {agree.agreeing}/{agree.compared} values ({100 * agree.fraction:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
