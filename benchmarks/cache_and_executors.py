"""The analysis cache and the executors, as a user meets them: the installed console
script, one process per command (so JAX's import and the script's tracing are in
every figure).

    python benchmarks/cache_and_executors.py [--layers 8 32] [--workers 2] [--repeat 3]

1. ``gate`` on an unchanged program: the second run (cache warm) over the first
   (cache empty), for the example script at each size, and for a snapshot folder
   (``gate --baseline DIR``, which reads only the checked-in .mlir).
2. ``lint`` with a warm cache over a bare ``lower().compile()`` of the same targets
   in a fresh process (both import JAX and trace the script).
3. ``sweep`` over the same candidates with the local executor (``--jobs N``) and
   on a Ray runtime of N CPUs started for the run (``--executor ray --jobs N``): wall
   times, each candidate's compile time and the scheduling overhead per candidate,
   from the sweep's own ``execution`` record; and from those, the wall time N
   machines would take (longest-first schedule of the measured compile times, plus
   the overhead, plus the runtime's start).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fsdp_tp_train_step.py")
SCRIPT = os.path.join(os.path.dirname(sys.executable), "jax-shard-lint")


def timed(argv: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-800:]}")
    return seconds


def bare_compile(layers: int) -> float:
    code = (
        "import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL']='1'; import jax;"
        "jax.config.update('jax_platforms','cpu'); jax.config.update('jax_num_cpu_devices', 8);"
        "import importlib.util as u; s=u.spec_from_file_location('m', sys.argv[1]); m=u.module_from_spec(s);"
        "s.loader.exec_module(m); t=m.shard_lint_targets(layers=int(sys.argv[2]));"
        "[l.compile() for l in t.values()]"
    )
    return timed([sys.executable, "-c", code, EXAMPLE, str(layers)])


def gate_ratio(layers: int, repeat: int, platform: str) -> tuple[float, float]:
    firsts, seconds = [], []
    work = tempfile.mkdtemp()
    baseline = os.path.join(work, "baseline.json")
    args = [EXAMPLE, "--set", f"layers={layers}", "-q", "--baseline", baseline, "--platform", platform]
    subprocess.run([SCRIPT, "gate", *args, "--update", "--no-cache"], check=True, capture_output=True, cwd=ROOT)
    for _ in range(repeat):
        cache = os.path.join(work, "cache")
        shutil.rmtree(cache, ignore_errors=True)
        firsts.append(timed([SCRIPT, "gate", *args, "--cache-dir", cache]))
        seconds.append(timed([SCRIPT, "gate", *args, "--cache-dir", cache]))
    shutil.rmtree(work, ignore_errors=True)
    return statistics.median(firsts), statistics.median(seconds)


def snapshot_gate_ratio(layers: int, repeat: int, platform: str) -> tuple[float, float]:
    work = tempfile.mkdtemp()
    snap = os.path.join(work, "snap")
    subprocess.run([SCRIPT, "snapshot", EXAMPLE, "--set", f"layers={layers}", "-o", snap, "-q", "--no-cache",
                    "--platform", platform],
                   check=True, capture_output=True, cwd=ROOT)
    firsts, seconds = [], []
    for _ in range(repeat):
        cache = os.path.join(work, "cache")
        shutil.rmtree(cache, ignore_errors=True)
        firsts.append(timed([SCRIPT, "gate", "--baseline", snap, "-q", "--cache-dir", cache]))
        seconds.append(timed([SCRIPT, "gate", "--baseline", snap, "-q", "--cache-dir", cache]))
    shutil.rmtree(work, ignore_errors=True)
    return statistics.median(firsts), statistics.median(seconds)


def warm_lint_vs_bare(layers: int, repeat: int) -> tuple[float, float]:
    cache = tempfile.mkdtemp()
    args = [SCRIPT, "lint", EXAMPLE, "--set", f"layers={layers}", "-q", "--format", "json", "--cache-dir", cache]
    timed(args)  # fills the cache
    warm = statistics.median(timed(args) for _ in range(repeat))
    bare = statistics.median(bare_compile(layers) for _ in range(repeat))
    shutil.rmtree(cache, ignore_errors=True)
    return warm, bare


def sweep(executor: str, workers: int, layers: int) -> dict:
    out = tempfile.mktemp(suffix=".json")
    argv = [SCRIPT, "sweep", EXAMPLE, "--set", f"layers={layers}", "--set", "seq=256", "--no-cache", "-q",
            "--format", "json", "-o", out, "--jobs", str(workers), "--executor", executor]
    for mesh in ("8x1", "4x2", "2x4", "1x8"):
        argv += ["--mesh", mesh]
    argv += ["--grid", "batch=16,32"]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    total = time.perf_counter() - t0
    with open(out) as f:
        run = json.load(f)
    os.unlink(out)
    run["process_seconds"] = total
    return run


def projected_wall(runs: list[dict], machines: int, overhead: float, startup: float) -> float:
    """Longest-first onto the least loaded machine: the makespan, with each candidate's overhead."""
    loads = [0.0] * machines
    for seconds in sorted((r["seconds"] for r in runs), reverse=True):
        k = loads.index(min(loads))
        loads[k] += seconds + overhead
    return startup + max(loads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--platform", default="cpu", help="for the gate ratios: cpu, or a GPU/TPU target")
    args = parser.parse_args()
    import jax

    print(f"jax {jax.__version__}, 8 virtual CPU devices, {os.cpu_count()} cores, median of {args.repeat}\n")
    print(f"1. gate on an unchanged program ({args.platform}): second run / first run")
    for layers in args.layers:
        first, second = gate_ratio(layers, args.repeat, args.platform)
        print(f"   script, {layers:2d} layers:    first {first:6.2f} s, second {second:6.2f} s, "
              f"ratio {second / first:.2f}x")
        first, second = snapshot_gate_ratio(layers, args.repeat, args.platform)
        print(f"   snapshot, {layers:2d} layers:  first {first:6.2f} s, second {second:6.2f} s, "
              f"ratio {second / first:.2f}x")
    if args.platform != "cpu":
        return 0
    print("\n2. lint with a warm cache / a bare lower().compile(), each a fresh process")
    for layers in args.layers:
        warm, bare = warm_lint_vs_bare(layers, args.repeat)
        print(f"   {layers:2d} layers: bare {bare:6.2f} s, lint (warm) {warm:6.2f} s, ratio {warm / bare:.2f}x")
    if args.no_ray:
        return 0
    print(f"\n3. sweep, 8 candidates (4 meshes x 2 batch sizes), {args.workers} workers")
    layers = args.layers[0]
    local = sweep("local", args.workers, layers)
    ray = sweep("ray", args.workers, layers)
    same = {k: v for k, v in local.items() if k not in ("execution", "process_seconds")} == \
        {k: v for k, v in ray.items() if k not in ("execution", "process_seconds")}
    for name, run in (("local", local), ("ray", ray)):
        x = run["execution"]
        print(f"   {name:5}: process {run['process_seconds']:6.2f} s, startup {x['startup_seconds']:5.2f} s, "
              f"candidates' wall {x['wall_seconds']:6.2f} s, compiles {x['candidate_seconds']:6.2f} s "
              f"({x['speedup']:.2f}x), overhead {x['mean_overhead_seconds']:.3f} s / candidate")
    print(f"   ray / local, whole process: {ray['process_seconds'] / local['process_seconds']:.2f}x; "
          f"reports identical apart from execution: {same}")
    x = ray["execution"]
    print("   projected on M one-CPU machines (longest first; measured compiles, overhead per candidate, startup):")
    serial = projected_wall(x["runs"], 1, 0.0, 0.0)
    for machines in (1, 2, 4, 8):
        wall = projected_wall(x["runs"], machines, x["mean_overhead_seconds"], x["startup_seconds"])
        print(f"     M={machines}: {wall:6.2f} s, speedup {serial / wall:.2f}x over the compiles run one after another "
              f"({serial:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
