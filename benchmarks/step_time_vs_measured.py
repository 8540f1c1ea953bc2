"""Predicted against measured step time on the GPUs JAX sees: each sweep
candidate of the examples is linted with ``--platform gpu`` (the estimate for
the real device model) and then run with random inputs, timed as the median of
N runs after a warm-up. Without a GPU it says so and exits 0.

    python benchmarks/step_time_vs_measured.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATES = [
    ("value_function_step.py", {}),
    ("fsdp_tp_train_step.py", {"mesh_shape": (8, 1)}),
    ("fsdp_tp_train_step.py", {"mesh_shape": (4, 2)}),
    ("fsdp_tp_train_step.py", {"mesh_shape": (2, 4)}),
]


def _measure(lowered, repeats: int) -> float:
    import jax
    import numpy as np

    compiled = lowered.compile()
    rng = np.random.default_rng(0)

    def concrete(info):
        data = rng.standard_normal(info.shape).astype(info.dtype) if info.dtype.kind == "f" else \
            rng.integers(0, 2, info.shape).astype(info.dtype)
        return jax.device_put(data, info.sharding)

    args = jax.tree.map(concrete, lowered.args_info[0], is_leaf=lambda x: hasattr(x, "shape"))
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    import jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        print("no GPU visible to JAX: nothing to measure (run this where one is)")
        return 0
    from jax_shard_lint.analyzer.commands.lint import LintRequest, lint
    from jax_shard_lint.analyzer.context.config import Settings
    from jax_shard_lint.analyzer.inputs.scripts import call_targets, load_entry

    devices = jax.devices()
    print(f"| candidate | predicted | measured | measured / predicted |  ({len(devices)} x {devices[0].device_kind})")
    print("| --- | --- | --- | --- |")
    for script, params in CANDIDATES:
        path = os.path.join(ROOT, "examples", script)
        sets = tuple(f"{k}={v!r}" for k, v in params.items())
        report = lint(LintRequest(path, (), sets), Settings(platform="gpu", devices=len(devices)))
        fn, where = load_entry(path)
        targets = call_targets(fn, where, dict(params), extra={"mesh_devices": devices})
        for t in report.targets:
            if t.time is None:
                print(f"| {script}:{t.name} {params} | (no device model for {devices[0].device_kind}) | | |")
                continue
            measured = _measure(targets[t.name], args.repeats)
            print(f"| {script}:{t.name} {params} | {t.time.seconds * 1e3:.2f} ms | {measured * 1e3:.2f} ms | "
                  f"{measured / t.time.seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
