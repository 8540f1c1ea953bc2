"""The solve memo: a sharding problem's solution, and each plan's check against propagation, kept in the
analysis cache's folder, so that ``suggest`` run again (another ``--format``, another report setting) reads its
solves and checks back instead of making them again, as the compile memo (``compile_memo.py``) reads its
compiles back. On newbie15's GraphNet a rerun with ``--format
json`` solved its 89,977-variable problem again (six solves of the refine loop, and one per compiled
version for its cost model) while every compile was read back.

The key is made of exactly what a solution depends on: the problem itself (its groups, ops, costs, budget and
ties, pickled: every field is a tuple, a number, a string or a dict in the mesh's order), the method, the
tool's source (which builds and solves it), and the releases of the solver (HiGHS comes with scipy) and of
numpy (the optimal-face price is numpy's generator) and Python. The solve is deterministic for a problem (no
clock stops it: ``solve.MIP_NODES``), so a solution read back is the one solving again would give. A problem
with no solution raises each time (nothing is stored). A plan's check is keyed by the same, the plan, and what
propagating it reads besides: the target's StableHLO text, whose code is the user's (the ownership), the device
model that prices it and the compilers (Shardy's sharding rules come with jaxlib).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys

from pydantic import BaseModel

from ....passes.pipelines.plan_check import LayoutCheck
from ....passes.pipelines.suggest import Assignment, ShardingProblem, Solution
from ...adapter import jax_adapter
from ...cache.analysis_cache import AnalysisCache
from ...cache.cache_key import cache_key, text_digest, tool_source_digest
from ...context.config import Settings
from .. import cached_analysis

# The memo's folder inside the analysis cache's, and how many solutions it keeps (least recently used go first).
MEMO_FOLDER = "solves"
MEMO_ENTRIES = 512


class SolveRecord(BaseModel):
    """A ``Solution``, field for field (its assignment as two lists of indices)."""
    groups: list[int]
    ops: list[int]
    seconds: float
    memory_bytes: int
    lower_bound: float | None
    method: str
    solve_seconds: float
    variables: int
    lp_bound: float | None
    untied_variables: int | None
    periods: list[int]
    tied_by: list[str]


class CheckRecord(BaseModel):
    """A plan's ``LayoutCheck``, or none (``matched`` false: propagation did not match, or Shardy refused)."""
    matched: bool
    seconds: float = 0.0
    layout: list[int] = []
    differing: list[int] = []
    culprits: list[tuple[tuple[int, int, str], int]] = []


_open: dict[str, AnalysisCache] = {}


class SolveMemo:
    """Solutions by problem in the analysis cache's folder (``passes/pipelines/suggest.refine`` asks it
    before each solve and gives it each solution made)."""

    def __init__(self, cache: AnalysisCache, propagation: dict[str, object] | None = None):
        self.cache = cache
        self.propagation = propagation  # what a check reads besides the problem and the plan; None: no checks

    @staticmethod
    def _parts(problem: ShardingProblem, method: str) -> dict[str, object]:
        import numpy
        import scipy

        return {"kind": "sharding-solve", "method": method,
                "problem": hashlib.sha256(pickle.dumps(problem, protocol=5)).hexdigest(),
                "tool": {"source": tool_source_digest()},
                "releases": {"scipy": scipy.__version__, "numpy": numpy.__version__,
                             "python": list(sys.version_info[:2])}}

    def get(self, problem: ShardingProblem, method: str) -> Solution | None:
        hit = self.cache.get(cache_key(self._parts(problem, method)), SolveRecord)
        if hit is None:
            return None
        return Solution(Assignment(tuple(hit.groups), tuple(hit.ops)), hit.seconds, hit.memory_bytes,
                        hit.lower_bound, hit.method, hit.solve_seconds, hit.variables, hit.lp_bound,
                        hit.untied_variables, tuple(hit.periods), tuple(hit.tied_by))

    def put(self, problem: ShardingProblem, method: str, solution: Solution) -> None:
        parts = self._parts(problem, method)
        s = solution
        record = SolveRecord(groups=list(s.assignment.groups), ops=list(s.assignment.ops), seconds=s.seconds,
                             memory_bytes=s.memory_bytes, lower_bound=s.lower_bound, method=s.method,
                             solve_seconds=s.solve_seconds, variables=s.variables, lp_bound=s.lp_bound,
                             untied_variables=s.untied_variables, periods=list(s.periods), tied_by=list(s.tied_by))
        self.cache.put(cache_key(parts), record, parts)


    def _check_key(self, problem: ShardingProblem, a: Assignment) -> tuple[str, dict[str, object]]:
        parts = {**self._parts(problem, "check"), "kind": "plan-check", "plan": [list(a.groups), list(a.ops)],
                 "propagation": self.propagation}
        return cache_key(parts), parts

    def get_check(self, problem: ShardingProblem, a: Assignment) -> tuple[bool, LayoutCheck | None]:
        if self.propagation is None:
            return False, None
        hit = self.cache.get(self._check_key(problem, a)[0], CheckRecord)
        if hit is None:
            return False, None
        if not hit.matched:
            return True, None
        return True, LayoutCheck(hit.seconds, tuple(hit.layout), tuple(hit.differing),
                                 tuple(((c[0], c[1], c[2]), n) for c, n in hit.culprits))

    def put_check(self, problem: ShardingProblem, a: Assignment, check: LayoutCheck | None) -> None:
        if self.propagation is None:
            return
        key, parts = self._check_key(problem, a)
        record = CheckRecord(matched=False) if check is None else CheckRecord(
            matched=True, seconds=check.seconds, layout=list(check.layout), differing=list(check.differing),
            culprits=[(c, n) for c, n in check.culprits])
        self.cache.put(key, record, parts)


def solve_memo(settings: Settings, text: str | None = None, ownership: object = None,
               spec: object = None) -> SolveMemo | None:
    """The run's solve memo (one per folder and process), or None where the analysis cache is off; with the
    target's StableHLO ``text`` (and the ``ownership`` and device ``spec`` its checks read), its plans' checks
    too."""
    if not settings.cache_dir:
        return None
    folder = os.path.join(os.path.abspath(settings.cache_dir), MEMO_FOLDER)
    if folder not in _open:
        _open[folder] = AnalysisCache(folder, max_entries=MEMO_ENTRIES)
    propagation: dict[str, object] | None = None if text is None else {
        # Its locations read as the compile memo reads them: the tool's frames and its callers' made alike.
        "program": text_digest(cached_analysis.without_tool_frames(text)),
        "ownership": repr(ownership), "spec": repr(spec), "compilers": jax_adapter.compiler_versions()}
    return SolveMemo(_open[folder], propagation)
