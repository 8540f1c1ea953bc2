"""Whether XLA compiles fix candidates side by side in threads on this jaxlib: N compiles of an example's StableHLO
(as lint compiles a candidate: from its text, no dumps, -O0 machine code) one after another and in threads, wall
and process CPU seconds, the figures compared; and whether a compile releases the GIL: a Python loop on the main
thread while another thread compiles, its iterations per second of its own CPU against the loop alone, and the CPU
it got (a compile that held the GIL would leave it none while it runs).

    python benchmarks/compile_threads.py [--example fsdp_tp_train_step.py] [--compiles 4] [--threads 1 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _spin(seconds: float) -> tuple[int, float, float]:
    """(iterations, this thread's CPU seconds, wall seconds) of a Python loop."""
    n, cpu, start = 0, time.thread_time(), time.perf_counter()
    while time.perf_counter() < start + seconds:
        n += 1
    return n, time.thread_time() - cpu, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="fsdp_tp_train_step.py")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--compiles", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from jax_shard_lint.analyzer.adapter import jax_adapter
    from jax_shard_lint.analyzer.inputs.scripts import call_targets, load_entry
    from jax_shard_lint.passes.pipelines.entry import entry_signature
    from jax_shard_lint.passes.pipelines.fix_checks import FIX_CHECKS

    fn, where = load_entry(os.path.join(ROOT, "examples", args.example))
    text = jax_adapter.stablehlo_text(next(iter(call_targets(fn, where, {}).values())))
    sig = entry_signature(jax_adapter.parse_stablehlo(text), FIX_CHECKS)

    def compile_one(_: int = 0) -> dict[str, int] | None:
        return jax_adapter.compile_stablehlo_text(text, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids,
                                                  with_reports=False, optimize_machine_code=False).memory

    compile_one()  # the first compile in a process pays its one-time set-up
    print(f"jax {jax.__version__}, {os.cpu_count()} cores, {args.example}", flush=True)
    for _ in range(args.rounds):
        for workers in args.threads:
            cpu, start = _cpu(), time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                figures = list(pool.map(compile_one, range(args.compiles)))
            print(f"{args.compiles} compiles, {workers} thread(s): wall {time.perf_counter() - start:.2f} s, "
                  f"CPU {_cpu() - cpu:.2f} s, figures equal {all(f == figures[0] for f in figures)}, "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for _ in range(args.rounds):
        alone = _spin(3.0)
        compiling = threading.Thread(target=compile_one)
        started = time.perf_counter()
        compiling.start()
        beside = _spin(3.0)
        compiling.join()
        print(f"GIL: a Python loop alone {alone[0] / alone[1]:,.0f} iterations per CPU second ({alone[1]:.2f} s CPU "
              f"in {alone[2]:.1f} s); beside a compile in another thread {beside[0] / beside[1]:,.0f} "
              f"({beside[1]:.2f} s CPU in {beside[2]:.1f} s; the compile took {time.perf_counter() - started:.1f} s); "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
