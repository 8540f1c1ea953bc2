"""The tool's wall time for `lint` over a bare `lower().compile()` of the same
targets, per example: lint as it runs by default (every fix compiled and
measured before it is shown) and with ``--no-fix-check``, in one run.

    python benchmarks/lint_overhead.py [--repeat 3] [--devices 8] [--example fsdp_tp_train_step.py ...]
        [--scale 32] [--baseline-root OTHER_CHECKOUT] [--list-compiles]

Every measurement is a fresh process whose clock starts before it imports JAX
(importing JAX and building the Lowered objects are in both sides), with no
analysis cache and JAX's compilation cache off, so nothing is reused. The kinds
are interleaved in each repeat (a slow spell of this shared machine hits all of
them alike) and each figure is the median; the load average is printed beside
them. Each lint's progress lines (stderr) give how many fix candidates it compiled and the seconds from
its first fix-check compile to its last, printed beside its time. ``--scale 32`` adds
scale_transformer.py's step at 32 layers on 64 devices. ``--baseline-root`` also runs both lints
from another checkout of the tool (``git worktree add`` or ``git archive`` of an older commit) in the same
run, for before/after ratios on the same machine load. Each lint's compile log (JAX_SHARD_LINT_COMPILE_LOG) gives
how many XLA compiles it made, and each fix-check stage's compiles, wall seconds and process CPU seconds;
``--list-compiles`` lists each compile (the fix-check stage, its seconds, the candidate).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["fsdp_tp_train_step.py", "value_function_step.py", "remat_layer_stack.py"]
SCALE = os.path.join(ROOT, "benchmarks", "scale_transformer.py")


def _measure(kind: str, script: str, params: dict[str, int], devices: int) -> dict[str, float]:
    """One measurement in this (fresh) process: seconds from before JAX's import, and the CPU
    seconds of the whole process (all threads; steadier than wall time on a shared machine)."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    t0 = time.perf_counter()
    if kind == "bare":
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
        from jax_shard_lint.analyzer.inputs.scripts import call_targets, load_entry

        fn, where = load_entry(script)
        for lowered in call_targets(fn, where, dict(params)).values():
            lowered.compile()
    else:
        from jax_shard_lint.analyzer.cli.main import run_command

        sets = [a for k, v in params.items() for a in ("--set", f"{k}={v}")]
        with tempfile.TemporaryDirectory() as out:
            code = run_command(["lint", script, *sets, "--devices", str(devices), "--no-cache",
                                "--format", "json", "--fail-on", "never", "-o", os.path.join(out, "r.json")]
                               + (["--no-fix-check"] if kind == "lint-no-fix" else []))
        if code not in (0, 1):
            raise SystemExit(f"lint exited {code}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": time.perf_counter() - t0, "cpu": usage.ru_utime + usage.ru_stime}


def _tool_path(root: str, folder: str) -> str:
    """A folder holding ``jax_shard_lint`` -> ``root``, to put first on PYTHONPATH."""
    link = os.path.join(folder, "jax_shard_lint")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(root), link)
    return folder


def _run_once(kind: str, script: str, params: dict[str, int], devices: int, root: str,
              folder: str) -> dict[str, float]:
    env = dict(os.environ, JSL_ROOT=os.path.abspath(root), JAX_SHARD_LINT_IN_PROCESS="1",
               PYTHONPATH=os.pathsep.join(p for p in (_tool_path(root, folder), os.environ.get("PYTHONPATH")) if p))
    env.pop("JAX_SHARD_LINT_NO_FIX_CHECK", None)
    log = os.path.join(folder, "compiles.jsonl")
    if os.path.exists(log):
        os.remove(log)
    env["JAX_SHARD_LINT_COMPILE_LOG"] = log
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", kind, "--script", script,
                           "--params", json.dumps(params), "--devices", str(devices)],
                          cwd=root, env=env, capture_output=True, text=True)
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not last:
        raise SystemExit(f"{kind} of {script} failed:\n{proc.stderr[-3000:]}")
    return json.loads(last[-1]) | _fix_compiles(proc.stderr) | _logged_compiles(log)


def _logged_compiles(log: str) -> dict:
    """Every XLA compile the lint made, from its compile log (compile_memo.py): lint's own (stage "lint"), the
    conflict check's and each fix-check stage's, with its candidate and seconds; and the candidates measured on a
    program compiled before ("same", no compile). A bare compile writes none."""
    if not os.path.exists(log):
        return {}
    lines = [json.loads(ln) for ln in open(log, encoding="utf-8")]
    compiles = [(ln.get("stage", "lint" if ln["entry"] == "lowered" else "?"), ln.get("candidate", ""), ln["seconds"])
                for ln in lines if ln["memo"] not in ("same", "stage")]
    # Each fix-check stage's wall and process CPU seconds (the conflict check's: one line per program it compiles).
    stages: dict[str, list[float]] = {}
    for ln in lines:
        if ln["memo"] == "stage":
            total = stages.setdefault(ln["stage"], [0, 0.0, 0.0])
            total[1] += ln["seconds"]
            total[2] += ln["cpu"]
    for stage, _, _ in compiles:
        if stage in stages:
            stages[stage][0] += 1
    return {"compiles": compiles, "reused": sum(ln["memo"] == "same" for ln in lines), "stages": stages}


# A progress line of the fix checks: "jax-shard-lint: [3/6] train_step: compiled ... (36.8 s)".
_PROGRESS = re.compile(r"\[\d+/\d+\] .*?: (compiling|compiled) .*\(([\d.]+) s\)$")


def _fix_compiles(stderr: str) -> dict[str, float]:
    """How many fix candidates lint compiled, and the seconds from its first fix-check compile to its last."""
    lines = [m for ln in stderr.splitlines() if (m := _PROGRESS.search(ln))]
    done = [float(m.group(2)) for m in lines if m.group(1) == "compiled"]
    return {"fix_compiles": len(done), "fix_seconds": max(done) - float(lines[0].group(2)) if done else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--example", nargs="*", default=EXAMPLES, help="examples/ files (none: only --scale)")
    parser.add_argument("--scale", type=int, nargs="*", default=[], help="scale_transformer.py at these depths")
    parser.add_argument("--scale-devices", type=int, default=64)
    parser.add_argument("--baseline-root", help="another checkout of the tool, measured in the same run")
    parser.add_argument("--list-compiles", action="store_true",
                        help="every XLA compile of each lint: its stage, wall seconds and candidate (compile log)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--script", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.script, json.loads(args.params), args.devices)))
        return 0

    cases = [(name, os.path.join(ROOT, "examples", name), {}, args.devices) for name in args.example]
    cases += [(f"scale_transformer {n} layers", SCALE, {"layers": n}, args.scale_devices) for n in args.scale]
    roots = {"": ROOT} | ({"before: ": args.baseline_root} if args.baseline_root else {})
    kinds = [("bare", "", ROOT)] + [(k, label, r) for label, r in roots.items() for k in ("lint", "lint-no-fix")]
    import jax

    print(f"jax {jax.__version__}, {os.cpu_count()} cores, median of {args.repeat}; "
          f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    folders = {r: tempfile.mkdtemp(prefix="lint-overhead-") for r in roots.values()}
    for name, script, params, devices in cases:
        runs: dict[str, list[dict[str, float]]] = {label + k: [] for k, label, _ in kinds}
        loads = []
        for _ in range(args.repeat):
            for k, label, root in kinds:
                loads.append(os.getloadavg()[0])
                # The same script for every checkout: the one of this checkout (its path is in its frames).
                runs[label + k].append(_run_once(k, script, params, devices, root, folders[root]))
                run = runs[label + k][-1]
                fixes = (f", {run['fix_compiles']:.0f} fix compiles over {run['fix_seconds']:.1f} s"
                         if run.get("fix_compiles") else "")
                logged = (f", {len(run['compiles'])} XLA compiles, {run['reused']} candidates reused"
                          if "compiles" in run else "")
                print(f"  {name}: {label + k} {run['seconds']:.2f} s "
                      f"(CPU {run['cpu']:.1f} s{fixes}{logged}, load average {loads[-1]:.1f})", flush=True)
                if args.list_compiles and "compiles" in run:
                    for stage, candidate, seconds in run["compiles"]:
                        print(f"    {stage:<20} {seconds:7.2f} s  {candidate}", flush=True)
                for stage, (n, seconds, stage_cpu) in run.get("stages", {}).items():
                    print(f"    stage {stage:<20} {n:2.0f} compiles, {seconds:7.2f} s wall, CPU {stage_cpu:6.2f} s",
                          flush=True)
        wall = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
        cpu = {k: statistics.median(r["cpu"] for r in v) for k, v in runs.items()}
        fixes = {k: (statistics.median(r.get("fix_compiles", 0) for r in v),
                     statistics.median(r.get("fix_seconds", 0.0) for r in v)) for k, v in runs.items()}
        cells = "; ".join(f"{k} {wall[k]:.2f} s, {wall[k] / wall['bare']:.2f}x (CPU {cpu[k]:.1f} s, "
                          f"{cpu[k] / cpu['bare']:.2f}x"
                          + (f"; {fixes[k][0]:.0f} fix compiles over {fixes[k][1]:.1f} s" if fixes[k][0] else "")
                          + ")" for k in runs if k != "bare")
        print(f"{name} ({devices} devices): bare compile {wall['bare']:.2f} s (CPU {cpu['bare']:.1f} s); {cells}; "
              f"load average {min(loads):.1f}-{max(loads):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
