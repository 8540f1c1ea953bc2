"""One candidate of a sweep as a unit of work any executor can run: the arguments of
the ``jax-shard-lint lint`` that compiles it, and what came back (the report's JSON or
the one-line error), with where and how long it ran.

Every executor but the in-process one runs the same command, ``python -P -m
jax_shard_lint.analyzer.cli.main lint ... --format json``, in a child process: on this
machine, or on a Ray worker. So a candidate's report is the same JSON wherever it was
compiled, and a script that crashes, hangs or exits takes its child with it, not the
worker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

# A candidate's child gets this long; the sweep's own --timeout bounds the whole run.
CANDIDATE_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class CandidateTask:
    index: int
    label: str
    # What follows ``jax-shard-lint`` on the child's command line.
    argv: tuple[str, ...]


@dataclass(frozen=True)
class CandidateOutcome:
    index: int
    report_json: str | None
    error: str | None
    worker: str
    # Seconds the child ran, measured where it ran.
    seconds: float
    # Scheduling and transfer: the time the task spent neither running nor waiting for a free
    # worker (handed out, shipped, started, its result sent back), measured by the executor.
    overhead_seconds: float = 0.0
    # Where it ran: the releases it compiled with (a Ray worker's).
    extra: dict[str, str] = field(default_factory=dict)
    # Wall-clock times on the worker (time.time()): when the task began and ended there.
    began_at: float = 0.0
    ended_at: float = 0.0


def lint_argv(script: str, targets: tuple[str, ...], params: list[str], forwarded: list[str]) -> tuple[str, ...]:
    argv = ["lint", script, "--format", "json", "--fail-on", "never", "-q", "--no-fix-check", *forwarded]
    for t in targets:
        argv += ["--target", t]
    for p in params:
        argv += ["--set", p]
    return tuple(argv)


def run_child(task: CandidateTask, cwd: str | None = None, env: dict[str, str] | None = None,
              worker: str | None = None) -> CandidateOutcome:
    """The candidate's lint in a child process of this one; its report or its one-line error."""
    started = time.monotonic()
    command = [sys.executable, "-P", "-m", "jax_shard_lint.analyzer.cli.main", *task.argv]
    try:
        # The command is supervised as any other (supervisor.py): compile-only TPU candidates side by
        # side get ALLOW_MULTIPLE_LIBTPU_LOAD there, and a hang or crash is its one-line error.
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, env=env,
                              timeout=CANDIDATE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return CandidateOutcome(task.index, None, f"stopped after {CANDIDATE_TIMEOUT_S:g} s",
                                worker or this_worker(), time.monotonic() - started)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("jax-shard-lint: ")]
        problem = (lines[-1] if lines else f"the candidate's lint exited with code {done.returncode}")
        problem = problem.removeprefix("jax-shard-lint: error: ").removeprefix("jax-shard-lint: ")
        return CandidateOutcome(task.index, None, problem, worker or this_worker(), seconds)
    return CandidateOutcome(task.index, done.stdout, None, worker or this_worker(), seconds)


def this_worker() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"
