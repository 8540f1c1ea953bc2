"""Compiles that do not depend on each other, run side by side: XLA releases the GIL while it
compiles, so a thread per core compiles the program as written and every fix candidate at once
(fix_checks.py). Each outcome is kept, report or exception, and read in the jobs' order."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...passes.models.report import TargetReport


def compile_side_by_side(jobs: list[Callable[[], TargetReport]],
                         done: Callable[[], None]) -> list[TargetReport | BaseException]:
    """Each job's report, or what it raised, in the jobs' order; up to one compile per core at a time."""
    if len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return [outcome(job, done) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), thread_name_prefix="fix-check") as pool:
        return list(pool.map(lambda job: outcome(job, done), jobs))


def outcome(job: Callable[[], TargetReport], done: Callable[[], None]) -> TargetReport | BaseException:
    try:
        return job()
    except Exception as e:  # handed to the loop that reads the outcomes in order, which raises or reports it
        return e
    finally:
        done()


def counted(progress: Callable[[str], None] | None, name: str, labels: list[str]) -> Callable[[], None]:
    """Told of each compile as it finishes: "[2/5] NAME: fix checks compiled" on ``progress``."""
    finished = 0
    lock = threading.Lock()
    if progress is not None:
        progress(f"[0/{len(labels)}] {name}: compiling {len(labels)} programs to check the fixes: "
                 + "; ".join(labels))

    def done() -> None:
        nonlocal finished
        with lock:
            finished += 1
            if progress is not None:
                progress(f"[{finished}/{len(labels)}] {name}: fix checks compiled")

    return done
