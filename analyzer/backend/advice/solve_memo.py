"""The solve memo: a sharding problem's solution kept in the analysis cache's folder, so that ``suggest`` run
again (another ``--format``, another report setting) reads its solves back instead of solving again, as the
compile memo (``compile_memo.py``) reads its compiles back. On newbie15's GraphNet a rerun with ``--format
json`` solved its 89,977-variable problem again (six solves of the refine loop, and one per compiled
version for its cost model) while every compile was read back.

The key is made of exactly what a solution depends on: the problem itself (its groups, ops, costs, budget and
ties, pickled: every field is a tuple, a number, a string or a dict in the mesh's order), the method, the
tool's source (which builds and solves it), and the releases of the solver (HiGHS comes with scipy) and of
numpy (the optimal-face price is numpy's generator) and Python. The solve is deterministic for a problem (no
clock stops it: ``solve.MIP_NODES``), so a solution read back is the one solving again would give. A problem
with no solution raises each time (nothing is stored).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys

from pydantic import BaseModel

from ....passes.pipelines.suggest import Assignment, ShardingProblem, Solution
from ...cache.analysis_cache import AnalysisCache
from ...cache.cache_key import cache_key, tool_source_digest
from ...context.config import Settings

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


_open: dict[str, AnalysisCache] = {}


class SolveMemo:
    """Solutions by problem in the analysis cache's folder (``passes/pipelines/suggest.refine`` asks it
    before each solve and gives it each solution made)."""

    def __init__(self, cache: AnalysisCache):
        self.cache = cache

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


def solve_memo(settings: Settings) -> SolveMemo | None:
    """The run's solve memo (one per folder and process), or None where the analysis cache is off."""
    if not settings.cache_dir:
        return None
    folder = os.path.join(os.path.abspath(settings.cache_dir), MEMO_FOLDER)
    if folder not in _open:
        _open[folder] = AnalysisCache(folder, max_entries=MEMO_ENTRIES)
    return SolveMemo(_open[folder])
