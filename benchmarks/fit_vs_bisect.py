"""How many compiles `fit` needs, against a plain binary search over the same
range for the same answer, on the examples.

    python benchmarks/fit_vs_bisect.py
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    # (script, param, other params, multiple of, lo, hi, budget)
    ("remat_layer_stack.py", "batch", ("layers=4",), 4, 4, 1024, 3 * 2**30),
    ("remat_layer_stack.py", "seq", ("layers=4", "batch=8"), 128, 128, 65536, 6 * 2**30),
    ("fsdp_tp_train_step.py", "batch", ("layers=2",), 4, 4, 1024, 4 * 2**30),
    ("value_function_step.py", "grid_points", (), 8, 8, 262144, 2 * 2**30),
]


def bisect(peak, budget, lo, hi, k):
    """Largest multiple of k in [lo, hi] with peak <= budget, by halving."""
    good = None
    a, b = -(-lo // k), hi // k
    while a <= b:
        mid = (a + b) // 2
        if peak(mid * k) <= budget:
            good, a = mid * k, mid + 1
        else:
            b = mid - 1
    return good


def main() -> int:
    import jax

    from jax_shard_lint.analyzer.adapter.jax_adapter import configure_devices
    from jax_shard_lint.analyzer.commands.fit import FitRequest, _Prober, search
    from jax_shard_lint.analyzer.context.config import Settings

    configure_devices("cpu", 8)
    print(f"jax {jax.__version__}, 8 virtual CPU devices")
    print("| example | param | range | budget | answer | fit compiles | bisection compiles | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for script, param, params, k, lo, hi, budget in CASES:
        path = os.path.join(ROOT, "examples", script)
        ours = _Prober.open(FitRequest(path, param, params=params), Settings())
        answer, _ = search(ours.peak, budget, lo, hi, k)
        theirs = _Prober.open(FitRequest(path, param, params=params), Settings())
        check = bisect(theirs.peak, budget, lo, hi, k)
        assert check == answer, (script, param, check, answer)
        print(f"| {script[:-3]} | {param} | {lo}..{hi} step {k} | {budget / 2**30:g} GiB | {answer} | "
              f"{len(ours.cache)} | {len(theirs.cache)} | {len(theirs.cache) / len(ours.cache):.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
