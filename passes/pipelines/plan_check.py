"""A plan checked against propagation (the suggest pipeline's stage 6, ``suggest.refine``): the plan's
argument and result shardings pinned in the module (the analyzer's edit), propagated by our propagation,
matched to the problem's tensors, and the layout propagation reaches priced with the plan's cost model
(``solver/refine.py``'s ``check_layout``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from jaxlib.mlir import ir

from ..models.device_spec import DeviceSpec
from ..propagation.call_graph import flatten_call_graph
from ..propagation.graph import ShardingGraph
from ..propagation.propagate import propagate
from ..propagation.sharding_graph import build_graph
from ..propagation.shardy_reference import with_sharding_rules
from ..solver.refine import LayoutCheck, check_layout
from ..solver.sharding_problem import Assignment, ShardingProblem
from ..solver.solve import SolveMemo
from ..source.frames import CodeOwnership

__all__ = ["LayoutCheck", "PlanMemo", "checked_plan"]  # LayoutCheck: the check the analyzer's memo keeps


class PlanMemo(SolveMemo, Protocol):
    """Solutions and their checks kept between runs (the analyzer's, for one target's module): ``get_check``
    (whether one is kept, the check: None where propagation did not match or Shardy refused) of plan ``a`` of
    ``problem``; ``put_check`` one made."""

    def get_check(self, problem: ShardingProblem, a: Assignment) -> tuple[bool, LayoutCheck | None]: ...

    def put_check(self, problem: ShardingProblem, a: Assignment, check: LayoutCheck | None) -> None: ...


def checked_plan(current: ShardingProblem, a: Assignment, graph: ShardingGraph, repinned: ir.Module,
                 ownership: CodeOwnership, spec: DeviceSpec) -> LayoutCheck | None:
    """The check of plan ``a`` of ``current`` (``graph``: the one the problem was built from; ``repinned``: the
    module with the plan's shardings pinned); None where the propagated graph does not match the problem."""
    g, arguments = _propagated(repinned, ownership)
    ids = _matched(graph, g)
    return None if ids is None else check_layout(_remapped(current, ids), a, g, arguments, spec)


def _propagated(repinned: ir.Module, ownership: CodeOwnership) -> tuple[ShardingGraph, tuple[int, ...]]:
    g = build_graph(with_sharding_rules(flatten_call_graph(repinned)), ownership)
    propagate(g)
    return g, tuple(tid for tid, f in g.function_args if f == g.entry)


def _matched(original: ShardingGraph, propagated: ShardingGraph) -> dict[int, int] | None:
    """Problem tensor id -> propagated tensor id. The graphs are built from one
    module whose entry attributes differ, so every tensor has its id, except the
    holders of stated result shardings (built last, one per stated result): those
    by name."""
    holders = {x.name: x.id for x in propagated.tensors if x.virtual}
    out = {}
    for x in original.tensors:
        if x.virtual and x.seed and x.seed.startswith("out_shardings of result"):
            if x.name not in holders:
                return None
            out[x.id] = holders[x.name]
        elif x.id < len(propagated.tensors) and propagated.tensors[x.id].shape == x.shape:
            out[x.id] = x.id
        else:
            return None
    return out


def _remapped(problem: ShardingProblem, ids: dict[int, int]) -> ShardingProblem:
    return replace(problem, groups=tuple(replace(g, tensors=tuple(ids[t] for t in g.tensors))
                                         for g in problem.groups))
