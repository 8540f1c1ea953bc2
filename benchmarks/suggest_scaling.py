"""``suggest``'s solver against model size and mesh, and the whole command
against a single compile.

    python benchmarks/suggest_scaling.py [--layers 4 8 32] [--meshes 1d 2d 3d]

The step is ``scale_transformer.py``'s transformer training step with Adam,
layers unrolled, at a small width (d_model 256, d_ff 1024, vocab 1024, batch
16, seq 64, 4 heads) so the program, not the arithmetic, grows with depth, on 8
virtual CPU devices: 1-D (data=8), 2-D (data=4 x model=2) and 3-D (data=2 x
fsdp=2 x model=2). For each (layers, mesh) it builds the sharding problem and
solves it as ``suggest --solver auto`` does (LP relaxation first; repeated
layers tied above 300,000 variables) and prints the variables before and after
tying, the solve time, the LP bound, the plan and the certified gap; where the
untied problem is within the ILP's limit, also the tied problem's plan against
the untied optimum. Last, the cost of the whole ``suggest``
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
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 8, 32])
    parser.add_argument("--meshes", nargs="+", default=list(MESHES), choices=list(MESHES))
    parser.add_argument("--command-layers", type=int, default=4)
    parser.add_argument("--no-command", action="store_true")
    args = parser.parse_args()

    from jax_shard_lint.analyzer.commands.suggest.target import SuggestRequest, target_problem
    from jax_shard_lint.analyzer.context.config import Settings
    from jax_shard_lint.passes.solver.sharding_problem import evaluate
    from jax_shard_lint.passes.solver.solve import MAX_ILP_VARIABLES, local_search, solve

    print("| layers | mesh | ops | untied variables | solved variables | build | solve | method | LP bound | plan | "
          "certified gap | untied ILP: solve, plan | tied vs untied |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: |")
    for layers in args.layers:
        for mesh in args.meshes:
            lowered = shard_lint_targets(layers=layers, mesh=mesh)["train_step"]
            t0 = time.perf_counter()
            problem = target_problem("train_step", lowered, SuggestRequest(path="bench"), Settings(devices=8), {},
                               "bench").problem
            build = time.perf_counter() - t0
            # What `suggest --solver auto` does: tied above MAX_ILP_VARIABLES, the ILP on the rest.
            auto = solve(problem, "auto", time_limit=300)
            gap = "-" if auto.certified_gap is None else f"{auto.certified_gap * 100:.2g}%"
            bound = "-" if auto.lp_bound is None else f"{auto.lp_bound * 1e3:.4f} ms"
            row = (f"| {layers} | {mesh} | {len(problem.ops):,} | {problem.size:,} | {auto.variables:,} | "
                   f"{build:.2f} s | {auto.solve_seconds:.2f} s | {auto.method} | {bound} | "
                   f"{auto.seconds * 1e3:.4f} ms | {gap} | ")
            if problem.size > MAX_ILP_VARIABLES:
                # Before tying, `auto` used the local search alone here: how far above this plan it lands.
                t0 = time.perf_counter()
                local = evaluate(problem, local_search(problem))[0]
                print(row + f"- (above the ILP's limit; before: local search {time.perf_counter() - t0:.2f} s, "
                      f"{(local / auto.seconds - 1) * 100:+.1f}% above this plan) | - |", flush=True)
                continue
            # Below the limit auto solved it untied: the tied problem's plan against that optimum.
            tied = solve(problem, "ilp", time_limit=300, tie=True)
            print(row + f"{auto.solve_seconds:.2f} s, {auto.seconds * 1e3:.4f} ms | "
                  f"{(tied.seconds / auto.seconds - 1) * 100:+.2f}% ({tied.variables:,} variables, "
                  f"{tied.solve_seconds:.2f} s) |", flush=True)
    if args.no_command:
        return

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
