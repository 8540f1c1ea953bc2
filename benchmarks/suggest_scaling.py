"""``suggest``'s solver against model size and mesh, and the whole command
against a single compile.

    python benchmarks/suggest_scaling.py [--layers 2 8 32] [--meshes 1d 2d 3d]

The step is ``scale_transformer.py``'s transformer training step with Adam,
layers unrolled, at a small width (d_model 256, d_ff 1024, vocab 1024, batch
16, seq 64, 4 heads) so the program, not the arithmetic, grows with depth, on 8
virtual CPU devices: 1-D (data=8), 2-D (data=4 x model=2) and 3-D (data=2 x
fsdp=2 x model=2). For each (layers, mesh) it builds the sharding problem and
solves it with the ILP (time limit 120 s) and with the local search, and prints
the variables, the solve times, the ILP's gap to HiGHS's bound, and how far the
local search lands above the ILP. Last, the cost of the whole ``suggest``
command (problem, solve, five compiles, the text check) against one bare
``lower().compile()`` of the same target.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MESHES = {"1d": ((8,), ("data",)), "2d": ((4, 2), ("data", "model")), "3d": ((2, 2, 2), ("data", "fsdp", "model"))}


def shard_lint_targets(layers=2, mesh="2d", mesh_devices=None):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P
    from scale_transformer import _model

    shape, names = MESHES[mesh]
    devices = (mesh_devices if mesh_devices is not None else jax.devices())[:8]
    m = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape), devices=devices)
    d_model, d_ff, vocab, batch, seq, heads = 256, 1024, 1024, 16, 64, 4
    loss_fn = _model(layers, d_model, d_ff, vocab, heads)

    def spec(s, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(s, dtype, sharding=NamedSharding(m, P()))

    params = {"embed": spec((vocab, d_model)),
              "layers": [{"wq": spec((d_model, d_model)), "wk": spec((d_model, d_model)),
                          "wv": spec((d_model, d_model)), "wo": spec((d_model, d_model)),
                          "up": spec((d_model, d_ff)), "down": spec((d_ff, d_model))} for _ in range(layers)]}
    opt_state = {"mu": params, "nu": params}
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(m, P(names[0])))

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        mu = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, opt_state["mu"], grads)
        nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt_state["nu"], grads)
        params = jax.tree.map(lambda p, a, v: p - 1e-3 * a / (jnp.sqrt(v) + 1e-8), params, mu, nu)
        return params, {"mu": mu, "nu": nu}, loss

    return {"train_step": jax.jit(train_step).lower(params, opt_state, tokens)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--meshes", nargs="+", default=list(MESHES), choices=list(MESHES))
    parser.add_argument("--command-layers", type=int, default=4)
    args = parser.parse_args()

    from jax_shard_lint.analyzer.commands.suggest import SuggestRequest, _problem
    from jax_shard_lint.analyzer.context.config import Settings
    from jax_shard_lint.passes.solver.sharding_problem import evaluate
    from jax_shard_lint.passes.solver.solve import MAX_ILP_VARIABLES, local_search, solve

    print("| layers | mesh | groups | ops | problem size | build | ILP solve | gap | local search | above ILP |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for layers in args.layers:
        for mesh in args.meshes:
            lowered = shard_lint_targets(layers=layers, mesh=mesh)["train_step"]
            t0 = time.perf_counter()
            problem = _problem("train_step", lowered, SuggestRequest(path="bench"), Settings(devices=8), {},
                               "bench").problem
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            local = evaluate(problem, local_search(problem))[0]
            local_s = time.perf_counter() - t0
            row = f"| {layers} | {mesh} | {len(problem.groups):,} | {len(problem.ops):,} | {problem.size:,} | " \
                  f"{build:.2f} s | "
            if problem.size > MAX_ILP_VARIABLES:  # what `--solver auto` does: the local search alone
                print(row + f"- (above {MAX_ILP_VARIABLES:,}) | - | {local_s:.2f} s | - |", flush=True)
                continue
            ilp = solve(problem, "ilp", time_limit=120)
            gap = "-" if ilp.gap is None else f"{ilp.gap * 100:.2g}%"
            print(row + f"{ilp.solve_seconds:.2f} s{' (limit)' if 'limit' in ilp.method else ''} | {gap} | "
                  f"{local_s:.2f} s | {(local / ilp.seconds - 1) * 100:+.1f}% |", flush=True)

    import jax

    from jax_shard_lint.analyzer.cli.main import run_command

    jax.config.update("jax_enable_compilation_cache", False)
    t0 = time.perf_counter()
    shard_lint_targets(layers=args.command_layers, mesh="2d")["train_step"].compile()
    bare = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            code = run_command(["suggest", os.path.abspath(__file__), "--set", f"layers={args.command_layers}",
                                "-q", "--format", "json"])
        finally:
            sys.stdout = stdout
    command = time.perf_counter() - t0
    print(f"\nsuggest (layers={args.command_layers}, 2-D, exit {code}): {command:.1f} s; bare lower+compile "
          f"{bare:.2f} s; ratio {command / bare:.1f}x")


if __name__ == "__main__":
    main()
