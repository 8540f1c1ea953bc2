"""Compiles that do not depend on each other, run side by side: XLA releases the GIL while it
compiles, so a thread per core compiles every fix candidate at once (fix_checks.py). Each outcome
is kept, report or exception, and read in the jobs' order."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...passes.models.report import TargetReport


def compile_side_by_side(jobs: list[Callable[[], TargetReport]],
                         done: list[Callable[[], None]]) -> list[TargetReport | BaseException]:
    """Each job's report, or what it raised, in the jobs' order; up to one compile per core at a time.
    ``done[k]`` is called when job k finishes."""
    if len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return [outcome(job, then) for job, then in zip(jobs, done)]
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), thread_name_prefix="fix-check") as pool:
        return list(pool.map(outcome, jobs, done))


def outcome(job: Callable[[], TargetReport], done: Callable[[], None]) -> TargetReport | BaseException:
    try:
        return job()
    except Exception as e:  # handed to the loop that reads the outcomes in order, which raises or reports it
        return e
    finally:
        done()


class CompileCounter:
    """Tells ``progress`` of each fix-check compile as it finishes, counted against every compile
    announced so far ("[2/3] NAME: compiled params['w'] -> P(None, 'tp')"); a second choice the checks
    ask for later is announced, and counted, when it is asked for."""

    def __init__(self, progress: Callable[[str], None] | None, name: str):
        self.progress, self.name = progress, name
        self.finished = self.total = 0
        self.lock = threading.Lock()

    def announce(self, labels: list[str], what: str = "to check the fixes") -> list[Callable[[], None]]:
        """One callback per label, for when its compile is done."""
        with self.lock:
            self.total += len(labels)
            if self.progress is not None and labels:
                self.progress(f"[{self.finished}/{self.total}] {self.name}: compiling {len(labels)} "
                              f"program{'s' if len(labels) > 1 else ''} {what}: " + "; ".join(labels))
        return [self._done_callback(label) for label in labels]

    def _done_callback(self, label: str) -> Callable[[], None]:
        def done() -> None:
            with self.lock:
                self.finished += 1
                if self.progress is not None:
                    self.progress(f"[{self.finished}/{self.total}] {self.name}: compiled {label}")

        return done
