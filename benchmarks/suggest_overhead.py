"""The wall time of `suggest` over a bare `lower().compile()` of the same targets, per model
script, in one run (issue 49's goal: suggest within 5x one compile).

    python benchmarks/suggest_overhead.py [--repeat 1] [--case examples/models/equinox_mlp.py ...]
        [--case /tmp/trial2/eqx_step.py:explicit=0] [--baseline-root OTHER_CHECKOUT]

A case is a script, optionally with ``:k=v,k=v`` for ``--set``. Every measurement is a fresh
process whose clock starts before it imports JAX (importing JAX, the script and tracing are in both
sides), with no analysis cache and JAX's compilation cache off. The kinds are interleaved in each
repeat and each figure is the median; the load average and the process's CPU seconds (all threads)
are printed beside the wall time, since other jobs share this machine. ``--baseline-root`` runs
`suggest` from another checkout too (``git worktree add`` of an older commit), for before/after on
the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from lint_overhead import _tool_path  # the same layout of a checkout to import from (a benchmark beside it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["examples/models/optax_adamw_mlp.py", "examples/models/equinox_mlp.py", "examples/models/penzai_llama.py"]


def _measure(kind: str, script: str, params: dict[str, str], devices: int) -> dict[str, float]:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    t0 = time.perf_counter()
    if kind == "bare":
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
        from jax_shard_lint.analyzer.inputs.scripts import call_targets, load_entry, parse_params

        fn, where = load_entry(script)
        typed = parse_params([f"{k}={v}" for k, v in params.items()])
        for lowered in call_targets(fn, where, typed).values():
            lowered.compile()
    else:
        from jax_shard_lint.analyzer.cli.main import run_command

        sets = [a for k, v in params.items() for a in ("--set", f"{k}={v}")]
        with tempfile.TemporaryDirectory() as out:
            code = run_command(["suggest", script, *sets, "--devices", str(devices), "--no-cache", "-q",
                                "--format", "json", "-o", os.path.join(out, "r.json")])
        if code not in (0, 1):
            raise SystemExit(f"suggest exited {code}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": time.perf_counter() - t0, "cpu": usage.ru_utime + usage.ru_stime}


def _run_once(kind: str, script: str, params: dict[str, str], devices: int, root: str,
              folder: str) -> dict[str, float]:
    env = dict(os.environ, JSL_ROOT=os.path.abspath(root), JAX_SHARD_LINT_IN_PROCESS="1",
               PYTHONPATH=os.pathsep.join(p for p in (_tool_path(root, folder), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", kind, "--script", script,
                           "--params", json.dumps(params), "--devices", str(devices)],
                          cwd=os.path.dirname(os.path.abspath(script)), env=env, capture_output=True, text=True)
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not last:
        raise SystemExit(f"{kind} of {script} failed:\n{proc.stderr[-3000:]}")
    return json.loads(last[-1])


def _case(text: str) -> tuple[str, dict[str, str]]:
    script, _, sets = text.partition(":")
    params = dict(kv.split("=", 1) for kv in sets.split(",") if kv)
    return os.path.abspath(os.path.join(ROOT, script)), params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--case", nargs="*", default=CASES)
    parser.add_argument("--baseline-root", help="another checkout of the tool, measured in the same run")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--script", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.script, json.loads(args.params), args.devices)))
        return 0
    roots = {"": ROOT} | ({"before: ": args.baseline_root} if args.baseline_root else {})
    kinds = [("bare", "", ROOT)] + [("suggest", label, r) for label, r in roots.items()]
    import jax

    print(f"jax {jax.__version__}, {os.cpu_count()} cores, median of {args.repeat}; "
          f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    folders = {r: tempfile.mkdtemp(prefix="suggest-overhead-") for r in roots.values()}
    for text in args.case:
        script, params = _case(text)
        runs: dict[str, list[dict[str, float]]] = {label + k: [] for k, label, _ in kinds}
        loads = []
        for _ in range(args.repeat):
            for k, label, root in kinds:
                loads.append(os.getloadavg()[0])
                runs[label + k].append(_run_once(k, script, params, args.devices, root, folders[root]))
                print(f"  {text}: {label + k} {runs[label + k][-1]['seconds']:.2f} s "
                      f"(CPU {runs[label + k][-1]['cpu']:.1f} s, load average {loads[-1]:.1f})", flush=True)
        wall = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
        cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in runs.items()}
        cells = "; ".join(f"{k} {wall[k]:.2f} s, {wall[k] / wall['bare']:.2f}x (CPU {cpu[k]:.1f} s, "
                          f"{cpu[k] / cpu['bare']:.2f}x)" for k in runs if k != "bare")
        print(f"{text}: bare compile {wall['bare']:.2f} s (CPU {cpu['bare']:.1f} s); {cells}; "
              f"load average {min(loads):.1f}-{max(loads):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
