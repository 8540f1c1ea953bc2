"""Runs the malformed-input corpus (fixtures/bad_input/corpus/cases.json).

    python tests/analyzer/cli/hostile_harness.py OUT.jsonl [CASE_ID ...]

Unsupervised cases run one after another in this process, which first caps its
address space (so a regression into an unbounded allocation fails the case
with MemoryError instead of taking the machine) and gives each case an alarm.
Supervised cases run through the real console script in a child process, with
a wall-clock limit, a few at once in threads beside the unsupervised ones (most of
their time is a child starting, or waiting out a --timeout). One JSON line per
case: id, exit code, stdout, stderr.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CASES = os.path.join(ROOT, "fixtures", "bad_input", "corpus", "cases.json")
# XLA's CPU client maps far more address space than it touches; 12 GiB leaves
# room for it and none for a 745 GiB replica-group table or a 4 GB live range.
ADDRESS_SPACE_LIMIT = 12 << 30
CASE_SECONDS = 120
SUPERVISED_SECONDS = 150
# Supervised cases at once: two wait out a 20 s --timeout, the rest mostly start a child (about 2 s of CPU).
SUPERVISED_AT_ONCE = 3


class CaseTimeout(BaseException):
    pass


def load_cases() -> list[dict]:
    with open(CASES, encoding="utf-8") as f:
        return json.load(f)


def expand(value: str, tmp: str) -> str:
    return value.replace("{tmp}", tmp).replace("{root}", ROOT)


def set_up(case: dict, tmp: str) -> None:
    for action, *args in case["setup"]:
        # write: [path, content]; symlink and copy: [source, path]; mkdir and fifo: [path].
        target = os.path.join(tmp, args[0] if action == "write" else args[-1])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if action == "mkdir":
            os.makedirs(target, exist_ok=True)
        elif action == "fifo":
            os.mkfifo(target)
        elif action == "symlink":
            os.symlink(args[0], target)
        elif action == "write":
            with open(target, "w", encoding="utf-8") as f:
                f.write(args[1])
        elif action == "copy":
            shutil.copy(os.path.join(ROOT, args[0]), target)
        else:
            raise ValueError(f"unknown setup action {action}")


def run_in_process(case: dict, tmp: str) -> tuple[int, str, str]:
    from jax_shard_lint.analyzer.cli.main import run_command

    out, err = io.StringIO(), io.StringIO()

    def on_alarm(*_):
        raise CaseTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_command([expand(a, tmp) for a in case["argv"]])
    except CaseTimeout:
        code = -1
        err.write(f"harness: case ran past {CASE_SECONDS} s\n")
    except MemoryError:
        code = -2
        err.write("harness: MemoryError under the address-space limit\n")
    finally:
        signal.alarm(0)
    return code, out.getvalue(), err.getvalue()


def run_supervised(case: dict, tmp: str, env: dict[str, str]) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "jax_shard_lint.analyzer.cli.main", *[expand(a, tmp) for a in case["argv"]]]
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUPERVISED_SECONDS)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        return -1, "", f"harness: case ran past {SUPERVISED_SECONDS} s\n{e.stderr or ''}"


def main(out_path: str, wanted: list[str]) -> None:
    os.chdir(ROOT)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    cases = [c for c in load_cases() if not wanted or c["id"] in wanted]
    unsupervised = [c for c in cases if not c["supervised"]]
    if unsupervised:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = ADDRESS_SPACE_LIMIT if hard == resource.RLIM_INFINITY else min(ADDRESS_SPACE_LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        import jax

        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", 8)
    # Taken before any case runs: an in-process case may set variables while a child starts.
    env = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    lock = threading.Lock()
    with open(out_path, "w", encoding="utf-8") as out:
        def write(record: dict) -> None:
            with lock:
                out.write(json.dumps(record) + "\n")
                out.flush()

        def run(case: dict) -> None:
            with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
                set_up(case, tmp)
                code, stdout, stderr = (run_supervised(case, tmp, env) if case["supervised"]
                                        else run_in_process(case, tmp))
                stderr = stderr.replace(tmp, "{tmp}")
            write({"id": case["id"], "exit": code, "stdout": stdout[:200000], "stderr": stderr[-4000:]})

        # The longest (a --timeout waited out) first; a child's case cannot take this process down with it.
        supervised = sorted((c for c in cases if c["supervised"]), key=lambda c: "--timeout" not in c["argv"])
        with concurrent.futures.ThreadPoolExecutor(SUPERVISED_AT_ONCE) as pool:
            children = [pool.submit(run, case) for case in supervised]
            for case in unsupervised:
                # Written before the case runs: if the harness itself dies, this line names the culprit.
                write({"id": case["id"], "started": True})
                run(case)
            for child in children:
                child.result()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
