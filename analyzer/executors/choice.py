"""The executor a command was asked for (``--jobs``, ``--executor``, ``--ray-address``)
and the one entry point every command hands its independent tasks to."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from .bundle import Bundle
from .candidates import CandidateOutcome, CandidateTask
from .local_processes import run_local


@dataclass(frozen=True)
class ExecutorChoice:
    kind: Literal["local", "ray"] = "local"
    jobs: int = 1
    ray_address: str | None = None

    @property
    def in_process(self) -> bool:
        """One task after another in this process (the default): no child, no shipping."""
        return self.kind == "local" and self.jobs == 1


@dataclass(frozen=True)
class Executed:
    outcomes: list[CandidateOutcome]
    workers: int
    # Starting (or reaching) the executor, and from handing the tasks out to the last result.
    startup_seconds: float
    wall_seconds: float


def run_tasks(choice: ExecutorChoice, tasks: Sequence[CandidateTask], bundle: Callable[[], Bundle],
              on_done: Callable[[CandidateOutcome], None]) -> Executed:
    """Every task's outcome, in the tasks' order; ``bundle`` (what a remote worker needs)
    is made only for Ray."""
    if choice.kind == "ray":
        from .ray_cluster import run_on_ray

        ran = run_on_ray(tasks, bundle(), choice.ray_address, choice.jobs if choice.jobs > 1 else None, on_done)
        return Executed(ran.outcomes, ran.cpus, ran.startup_seconds, ran.wall_seconds)
    began = time.monotonic()
    outcomes = run_local(tasks, choice.jobs, on_done)
    return Executed(outcomes, choice.jobs, 0.0, time.monotonic() - began)
