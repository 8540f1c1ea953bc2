"""The local executor: candidates in child processes of this one, N at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

from .candidates import CandidateOutcome, CandidateTask, run_child

Done = Callable[[CandidateOutcome], None]


def run_local(tasks: Sequence[CandidateTask], jobs: int, on_done: Done) -> list[CandidateOutcome]:
    """Every task's outcome, in the tasks' order; ``on_done`` hears of each as it finishes."""
    outcomes: dict[int, CandidateOutcome] = {}

    def one(task: CandidateTask) -> CandidateOutcome:
        # Timed from when a slot takes it: waiting for a free slot is queueing, not overhead.
        taken = time.monotonic()
        outcome = run_child(task, worker=f"this machine, {threading.current_thread().name}")
        return replace(outcome, overhead_seconds=max(0.0, time.monotonic() - taken - outcome.seconds))

    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="slot") as pool:
        futures = [pool.submit(one, t) for t in tasks]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.index] = outcome
            on_done(outcome)
    return [outcomes[t.index] for t in tasks]
