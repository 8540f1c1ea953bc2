"""Cost at scale: a transformer training step with Adam (d_model 1024, d_ff 4096,
vocab 32768, batch 64, seq 512) on 64 virtual CPU devices (8 x 8 data x model),
layers unrolled, at several depths.

    python benchmarks/scale_transformer.py [--layers 8 32 64] [--devices 64] [--repeats 3]

For each depth, each measurement runs in a fresh process (so peak RSS is its
own): a bare ``lower().compile()``, ``jax-shard-lint lint``, ``jax-shard-lint
propagate`` (whole command, report included) and Shardy's
``sdy-propagation-pipeline`` on the same StableHLO module. It prints the times,
peak RSS, JSON sizes and the ratios: lint / bare compile, and propagate /
(Shardy + the compile propagate needs).

This file is also the script being linted: its ``shard_lint_targets(layers=...)``
builds the step, so no generated module is checked in.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def _model(layers, d_model, d_ff, vocab, heads):
    import jax.numpy as jnp

    def block(h, w):
        x = h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)
        b, s, d = x.shape
        q = (x @ w["wq"]).reshape(b, s, heads, d // heads)
        k = (x @ w["wk"]).reshape(b, s, heads, d // heads)
        v = (x @ w["wv"]).reshape(b, s, heads, d // heads)
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads)
        att = jnp.exp(att - att.max(-1, keepdims=True))
        att = att / att.sum(-1, keepdims=True)
        h = h + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, s, d) @ w["wo"]
        x = h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)
        up = x @ w["up"]
        return h + (up * (1 / (1 + jnp.exp(-up)))) @ w["down"]

    def loss_fn(params, tokens):
        h = params["embed"][tokens]
        for w in params["layers"]:
            h = block(h, w)
        logits = h @ params["embed"].T
        logits = logits - logits.max(-1, keepdims=True)
        logp = logits - jnp.log(jnp.exp(logits).sum(-1, keepdims=True))
        labels = jnp.roll(tokens, -1, axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    return loss_fn


def shard_lint_targets(layers=8, d_model=1024, d_ff=4096, vocab=32768, batch=64, seq=512, heads=16,
                       mesh_devices=None):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = mesh_devices if mesh_devices is not None else jax.devices()
    n = len(devices)
    model_axis = 8 if n % 8 == 0 and n >= 64 else (2 if n % 2 == 0 else 1)
    mesh = jax.make_mesh((n // model_axis, model_axis), ("data", "model"), axis_types=(AxisType.Auto,) * 2,
                         devices=devices)
    loss_fn = _model(layers, d_model, d_ff, vocab, heads)

    def spec(shape, pspec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    col, row = P(None, "model"), P("model", None)
    params = {
        "embed": spec((vocab, d_model), P("model", None)),
        "layers": [{"wq": spec((d_model, d_model), col), "wk": spec((d_model, d_model), col),
                    "wv": spec((d_model, d_model), col), "wo": spec((d_model, d_model), row),
                    "up": spec((d_model, d_ff), col), "down": spec((d_ff, d_model), row)} for _ in range(layers)],
    }
    opt_state = {"mu": params, "nu": params, "count": spec((), P(), jnp.int32)}
    tokens = spec((batch, seq), P("data"), jnp.int32)

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        count = opt_state["count"] + 1
        mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt_state["mu"], grads)
        nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt_state["nu"], grads)
        c1, c2 = 1 - 0.9 ** count, 1 - 0.999 ** count
        params = jax.tree.map(lambda p, m, v: p - 1e-3 * (m / c1) / (jnp.sqrt(v / c2) + 1e-8), params, mu, nu)
        return params, {"mu": mu, "nu": nu, "count": count}, loss

    step = jax.jit(train_step, out_shardings=(jax.tree.map(lambda x: x.sharding, params),
                                              jax.tree.map(lambda x: x.sharding, opt_state), None),
                   donate_argnums=(0, 1))
    return {"train_step": step.lower(params, opt_state, tokens)}


# -- one measurement, in its own process ---------------------------------------------------------

def _measure(what: str, layers: int, devices: int) -> dict:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    out: dict = {"what": what, "layers": layers}
    # Both sides start the clock before importing anything, in a fresh process:
    # importing JAX (about 1 s here) is part of any run of the script, so it
    # belongs to the bare compile as much as to lint.
    t0 = time.perf_counter()
    if what in ("bare", "shardy"):
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
        lowered = shard_lint_targets(layers=layers)["train_step"]
        if what == "bare":
            compiled = lowered.compile()
            out["seconds"] = time.perf_counter() - t0
            out["stablehlo_bytes"] = len(lowered.as_text(debug_info=True))
            out["hlo_bytes"] = len(compiled.as_text())
        else:
            from jax_shard_lint.analyzer.adapter import jax_adapter
            from jax_shard_lint.passes.propagation.shardy_reference import shardy_propagated

            module = jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered))
            t0 = time.perf_counter()
            shardy_propagated(module)
            out["seconds"] = time.perf_counter() - t0
    else:
        from jax_shard_lint.analyzer.cli.main import run_command as main

        json_path = f"/tmp/scale_{what}_{layers}.json"
        args = [what, HERE, "--set", f"layers={layers}", "--devices", str(devices), "--format", "json",
                "-o", json_path] + (["--fail-on", "never"] if what == "lint" else [])
        code = main(args)
        out["seconds"] = time.perf_counter() - t0
        out["exit"] = code
        out["json_bytes"] = os.path.getsize(json_path) if os.path.exists(json_path) else None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["max_rss_mib"] = usage.ru_maxrss / 1024
    # CPU seconds of the process, all threads: the cost itself, steadier than wall
    # time on a shared VM (it includes the imports before the clock for both kinds).
    out["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return out


def _run_once(what: str, layers: int, devices: int) -> dict:
    proc = subprocess.run([sys.executable, HERE, "--measure", what, "--layers", str(layers), "--devices", str(devices)],
                          capture_output=True, text=True)
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not last:
        raise SystemExit(f"{what} at {layers} layers failed:\n{proc.stderr[-3000:]}")
    return json.loads(last[-1])


def _measure_all(layers: int, devices: int, repeats: int) -> dict[str, dict]:
    """Each measurement ``repeats`` times, the four kinds interleaved (so a slow
    spell of the machine hits all of them alike); the median run of each."""
    runs: dict[str, list[dict]] = {w: [] for w in ("bare", "lint", "shardy", "propagate")}
    for _ in range(repeats):
        for what, seen in runs.items():
            seen.append(_run_once(what, layers, devices))
    return {what: sorted(seen, key=lambda r: r["seconds"])[len(seen) // 2] for what, seen in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement; the median is shown")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.layers[0], args.devices)))
        return 0
    print(f"{'layers':>6} {'StableHLO':>10} {'HLO':>9} {'bare':>8} {'lint':>8} {'ratio':>6} {'cpu ratio':>9} "
          f"{'shardy':>7} "
          f"{'propagate':>9} {'ratio':>6} {'RSS lint':>9} {'RSS prop':>9} {'JSON lint':>10} {'JSON prop':>10}")
    for layers in args.layers:
        med = _measure_all(layers, args.devices, max(1, args.repeats))
        bare, lint, shardy, prop = med["bare"], med["lint"], med["shardy"], med["propagate"]
        # propagate compiles once (to match predicted against compiled collectives).
        budget = shardy["seconds"] + bare["seconds"]
        print(f"{layers:6d} {bare['stablehlo_bytes'] / 1e6:9.1f}M {bare['hlo_bytes'] / 1e6:8.1f}M "
              f"{bare['seconds']:7.1f}s {lint['seconds']:7.1f}s {lint['seconds'] / bare['seconds']:5.2f}x "
              f"{lint['cpu_seconds'] / bare['cpu_seconds']:8.2f}x "
              f"{shardy['seconds']:6.2f}s {prop['seconds']:8.1f}s {prop['seconds'] / budget:5.2f}x "
              f"{lint['max_rss_mib']:8.0f}M {prop['max_rss_mib']:8.0f}M "
              f"{(lint['json_bytes'] or 0) / 1e6:9.2f}M {(prop['json_bytes'] or 0) / 1e6:9.2f}M", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
