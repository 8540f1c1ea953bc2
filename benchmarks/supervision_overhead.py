"""What running every command in a supervised child costs (analyzer/supervisor.py).

    python benchmarks/supervision_overhead.py [--repeats N]

Each command runs N times through the console script as users run it (a thin
parent that starts the command in a child) and N times with
JAX_SHARD_LINT_IN_PROCESS=1 (the command in the calling process, unsupervised);
the medians and their ratio are printed, in one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = [
    ["rules"],
    ["lint", "fixtures/gate/step_v1.py", "-q", "--format", "json"],
    ["check", "fixtures/hlo/cpu_fsdp.hlo", "-q", "--format", "json"],
]


def median_seconds(argv: list[str], env: dict, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(["jax-shard-lint", *argv], cwd=ROOT, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    print(f"{'command':<10} {'in process':>11} {'supervised':>11} {'ratio':>7} {'added':>8}")
    for argv in COMMANDS:
        alone = median_seconds(argv, {**base, "JAX_SHARD_LINT_IN_PROCESS": "1"}, args.repeats)
        supervised = median_seconds(argv, base, args.repeats)
        print(f"{argv[0]:<10} {alone:>10.2f}s {supervised:>10.2f}s {supervised / alone:>6.2f}x "
              f"{supervised - alone:>+7.2f}s")


if __name__ == "__main__":
    main()
