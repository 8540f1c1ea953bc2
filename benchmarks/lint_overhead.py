"""The tool's wall time for `lint` over a bare `lower().compile()` of the same
targets, per example, measured in one process: lint as it runs by default (every
fix compiled and measured before it is shown) and with ``--no-fix-check``.

    python benchmarks/lint_overhead.py [--repeat 5] [--devices 8]

Both sides start from the script's entry point (building the Lowered objects is
included in both) and JAX's caches are cleared before every measurement, so
neither side reuses the other's compile. The ratio is the median over repeats,
alternating the sides.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["fsdp_tp_train_step.py", "value_function_step.py", "remat_layer_stack.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args()

    import jax

    from jax_shard_lint.analyzer.adapter.jax_adapter import configure_devices
    from jax_shard_lint.analyzer.commands.lint import LintRequest, lint
    from jax_shard_lint.analyzer.context.config import Settings
    from jax_shard_lint.analyzer.inputs.scripts import call_targets, load_entry

    configure_devices("cpu", args.devices)
    checked, unchecked = Settings(devices=args.devices, check_fixes=True), Settings(devices=args.devices)
    print(f"jax {jax.__version__}, {args.devices} virtual CPU devices, {os.cpu_count()} cores, "
          f"median of {args.repeat}")
    print(f"{'example':28} {'bare compile':>13} {'lint':>9} {'ratio':>7} {'--no-fix-check':>15} {'ratio':>7}")
    ratios, bare_ratios = [], []
    for name in EXAMPLES:
        path = os.path.join(ROOT, "examples", name)
        bare, tool, tool_bare = [], [], []
        for _ in range(args.repeat):
            jax.clear_caches()
            t0 = time.perf_counter()
            fn, where = load_entry(path)
            for lowered in call_targets(fn, where, {}).values():
                lowered.compile()
            bare.append(time.perf_counter() - t0)
            for settings, times in ((checked, tool), (unchecked, tool_bare)):
                jax.clear_caches()
                t0 = time.perf_counter()
                lint(LintRequest(path), settings)
                times.append(time.perf_counter() - t0)
        b, t, u = statistics.median(bare), statistics.median(tool), statistics.median(tool_bare)
        ratios.append(t / b)
        bare_ratios.append(u / b)
        print(f"{name:28} {b:12.2f}s {t:8.2f}s {t / b:6.2f}x {u:14.2f}s {u / b:6.2f}x")
    print(f"{'geometric mean':28} {'':13} {'':9} {statistics.geometric_mean(ratios):6.2f}x {'':15} "
          f"{statistics.geometric_mean(bare_ratios):6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
