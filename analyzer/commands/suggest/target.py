"""suggest's request (the script, its targets, the mesh axes, the arguments held) and a target's sharding
problem read from it: the problem itself is ``backend/advice/problem.py``'s, which lint's and check's
solver fixes build too."""

from __future__ import annotations

from dataclasses import dataclass

from ...adapter import jax_adapter
from ...backend.advice.problem import SuggestTarget, problem_of_text
from ...context.config import Settings
from ...executors.checked_in_tasks import Spread
from .fixed import fixed_shardings


@dataclass(frozen=True)
class SuggestRequest:
    path: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()  # PATH (as written) or PATH=SPEC
    solver: str = "auto"
    time_limit: float = 60.0
    # Where the versions compile: in this process (side by side on several cores), or in children (--jobs, --executor).
    spread: Spread = Spread()


def target_problem(name: str, lowered, request: SuggestRequest, settings: Settings, declared: dict,
                   where: str) -> SuggestTarget:
    """The problem of a lowered target over the request's axes, its --fix arguments and the script's
    ``shard_lint_fixed()`` held."""
    return problem_of_text(name, jax_adapter.stablehlo_text(lowered), request.axes, settings,
                           lambda sig: fixed_shardings(request.fixes, declared, sig, where), where, lowered)
