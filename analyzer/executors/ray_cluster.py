"""The Ray executor: each candidate a Ray task on a cluster (``--ray-address``), or on
a Ray runtime started here for the run and stopped after it.

Ray is optional (``pip install 'jax-shard-lint[ray]'``); the workers need jax-shard-lint
and the same JAX releases installed (a candidate compiled by other releases is
reported as failed, never mixed into the ranking). What a task ships is the script's
folder (bundle.py); what it returns is the candidate's report JSON.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..errors import ShardLintInputError
from .bundle import Bundle
from .candidates import CandidateOutcome, CandidateTask
from .ray_worker import LOSE_WORKER_ONCE_ENV, run_on_worker, worker_versions

# A task whose worker died is run again this many times before the candidate is reported as failed.
MAX_RETRIES = 3
# The object store of a runtime started here: it holds one bundle and the candidates' reports.
LOCAL_OBJECT_STORE_BYTES = 256 << 20


@dataclass(frozen=True)
class RayRun:
    outcomes: list[CandidateOutcome]
    cpus: int
    # Starting (or reaching) the Ray runtime, and from handing the tasks out to the last result.
    startup_seconds: float
    wall_seconds: float


def _ray():
    try:
        import ray
    except ImportError:
        raise ShardLintInputError("--executor", "ray is not installed here: pip install 'jax-shard-lint[ray]'") \
            from None
    return ray


def run_on_ray(tasks: Sequence[CandidateTask], bundle: Bundle, address: str | None, workers: int | None,
               on_done: Callable[[CandidateOutcome], None]) -> RayRun:
    """Every task's outcome in the tasks' order, with the CPUs that ran them and the times.

    What Ray prints while connected (a lost worker's notice, from a thread of its own) goes
    to stderr: stdout is the report's."""
    with contextlib.redirect_stdout(sys.stderr):
        return _run_on_ray(tasks, bundle, address, workers, on_done)


def _run_on_ray(tasks: Sequence[CandidateTask], bundle: Bundle, address: str | None, workers: int | None,
                on_done: Callable[[CandidateOutcome], None]) -> RayRun:
    ray = _ray()
    began = time.monotonic()
    started_here = not ray.is_initialized()
    if started_here:
        options: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
        if address is None:
            options.update(num_cpus=workers, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
        try:
            with warnings.catch_warnings():
                # JAX warns about os.fork() in a multithreaded process; Ray's fork is an exec of its own servers.
                warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
                ray.init(address=address or "local", **options)
        except Exception as e:  # noqa: BLE001 - no cluster there, or a runtime that cannot start here
            raise ShardLintInputError("--ray-address" if address else "--executor",
                                      f"could not start or reach Ray{f' at {address}' if address else ''}: "
                                      f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") \
                from None
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(run_on_worker)
        if os.environ.get(LOSE_WORKER_ONCE_ENV):  # the tests' fault injection, passed to the workers
            remote = remote.options(runtime_env={"env_vars": {LOSE_WORKER_ONCE_ENV: os.environ[LOSE_WORKER_ONCE_ENV]}})
        shipped = ray.put(bundle)
        startup = time.monotonic() - began
        submitted, handed_out = time.time(), time.monotonic()
        pending = {remote.remote(shipped, task): task for task in tasks}
        here = worker_versions()
        outcomes: dict[int, CandidateOutcome] = {}
        received: dict[int, float] = {}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            try:
                outcome = ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - retries spent: that candidate fails, the sweep goes on
                outcome = CandidateOutcome(task.index, None, f"its Ray task failed after {MAX_RETRIES} retries: "
                                           f"{type(e).__name__}", "ray", 0.0)
            received[task.index] = time.time()
            outcome = _same_releases(outcome, here)
            outcomes[task.index] = outcome
            on_done(outcome)
        timed = _with_overheads([outcomes[t.index] for t in tasks], submitted, received)
        return RayRun(timed, cpus, startup, time.monotonic() - handed_out)
    finally:
        if started_here:
            ray.shutdown()


def _with_overheads(outcomes: list[CandidateOutcome], submitted: float,
                    received: dict[int, float]) -> list[CandidateOutcome]:
    """Each task's scheduling and transfer time: from when its worker was free (the task
    before it there ended, or the sweep handed everything out) to its start there, the
    time on the worker outside the child (unpacking, starting), and from its end there to
    its result here. Queueing behind other candidates is not overhead. Worker clocks are
    compared with this one's: on a cluster, skew between machines shows up here."""
    free_at: dict[str, float] = {}
    out = []
    for o in sorted(outcomes, key=lambda o: (o.worker, o.began_at)):
        if not o.began_at:  # never ran (its retries spent): no times to split
            out.append(o)
            continue
        before = max(0.0, o.began_at - max(submitted, free_at.get(o.worker, submitted)))
        inside = max(0.0, (o.ended_at - o.began_at) - o.seconds)
        after = max(0.0, received[o.index] - o.ended_at)
        free_at[o.worker] = o.ended_at
        out.append(replace(o, overhead_seconds=before + inside + after))
    by_index = {o.index: o for o in out}
    return [by_index[o.index] for o in outcomes]


def _same_releases(outcome: CandidateOutcome, here: dict[str, str]) -> CandidateOutcome:
    there = outcome.extra
    if not there or there == here:
        return outcome
    differ = sorted(k for k in set(here) | set(there) if here.get(k) != there.get(k))
    shown = ", ".join(f"{k} {there.get(k, 'missing')} (here {here.get(k, 'missing')})" for k in differ)
    return replace(outcome, report_json=None, error=f"compiled by other releases on {outcome.worker}: {shown}")
