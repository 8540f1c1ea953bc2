"""The solver's plan against propagation: what the compiled program will do with
the argument shardings the solver chose.

The ILP (``solver/problem.py``) prices a plan in which every intermediate takes the
sharding the solver gave it. A compiled program keeps only the argument and
result shardings; Shardy propagates them greedily (a sharding an operand has is
carried into the result whenever it fits, the larger tensor wins a conflict), and
the intermediates land where propagation puts them. An embedding table sharded
on its model dimension, which the plan all-gathers at its use, instead carries
that axis into every activation after the lookup: the plan's batch sharding never
happens and the step compiles slower than the plan said.

This pass takes the propagated graph of the plan's arguments (``propagation``, run
by the caller on the same flattened module, so tensor ids match the problem's),
and returns

- the layout: per value group, the candidate propagation chose (the plan's own
  where propagation left a sharding no candidate has);
- its price, with the plan's cost model: every op takes its cheapest strategy
  among those the layout's shardings support, a move the plan forbids (an axis that appears from nowhere) priced
  as the reshard it is;
- the groups where plan and propagation disagree, and the arguments whose
  shardings propagated into those disagreements: each axis the plan did not
  want on a dimension, followed back through propagation's parent links to the
  argument dimension it came from, by the bytes it reached. ``suggest`` takes
  that axis off that dimension of the argument and solves again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from math import prod

from ..common.axes import sharding_labels
from ..common.shapes import array_bytes
from ..models.device_spec import DeviceSpec
from ..propagation.graph import ShardingGraph
from .sharding_problem import FORBIDDEN, Assignment, ShardingProblem, reshard_seconds

MAX_CHAIN = 10_000  # parent links followed from one dimension (a guard: chains end at a seed)


@dataclass(frozen=True)
class LayoutCheck:
    seconds: float  # the propagated layout, priced
    layout: tuple[int, ...]  # candidate index per group, as propagated
    differing: tuple[int, ...]  # groups whose propagated sharding is not the plan's
    # ((argument index, its dimension, mesh axis), bytes of disagreement it reached), largest first
    culprits: tuple[tuple[tuple[int, int, str], int], ...]


def price_layout(problem: ShardingProblem, layout: tuple[int, ...], spec: DeviceSpec) -> float:
    """Seconds of a layout (a candidate per group). Each op takes its cheapest
    strategy among those the layout supports: every axis a strategy puts on a
    factor is where one of the op's tensors has it (the partitioner computes an op
    on its tensors' shardings and never invents parallelism to gather it back); a
    move the plan forbids (an axis from nowhere) is priced as the reshard it is."""
    seconds = sum(g.unary[layout[g.id]] for g in problem.groups)
    for op in problem.ops:
        best = FORBIDDEN
        for s in range(len(op.strategies)):
            wants = [(use, use.shardings[use.wanted[s]], problem.groups[use.group].candidates[layout[use.group]])
                     for use in op.uses]
            used = {a for _, wanted, _ in wants for axes in wanted for a in axes}
            held = {a for _, wanted, have in wants for w, h in zip(wanted, have) for a in w if a in h}
            if used - held:
                continue
            cost = op.seconds[s]
            for use, wanted, have in wants:
                step = use.seconds[use.wanted[s]][layout[use.group]]
                if step == FORBIDDEN:
                    group = problem.groups[use.group]
                    step = op.repeats * reshard_seconds(group.shape, group.dtype,
                                                        *((wanted, have) if use.is_result else (have, wanted)),
                                                        problem.axis_sizes, spec)
                cost += step
                if cost >= best:
                    break
            best = min(best, cost)
        seconds += best
    return seconds


def _root(g: ShardingGraph, tid: int, d: int, axis: str, memo: dict[tuple[int, int, str], tuple[int, int]],
          ) -> tuple[int, int]:
    """(tensor, dimension) where ``axis`` on dimension ``d`` of ``tid`` was first
    stated: parent links back, at each step to the source's dimension holding it.
    Every link walked is remembered in ``memo``, so the check stays linear in the
    program however many disagreements share a chain."""
    path: list[tuple[int, int, str]] = []
    seen: set[tuple[int, int]] = set()
    root = (tid, d)
    for _ in range(MAX_CHAIN):
        if (tid, d, axis) in memo:
            root = memo[(tid, d, axis)]
            break
        path.append((tid, d, axis))
        t = g.tensors[tid]
        link = t.parent[d] if d < len(t.parent) else None
        root = (tid, d)
        if link is None or (tid, d) in seen:
            break
        seen.add((tid, d))
        dims = [e for e, a in enumerate(g.tensors[link[0]].dims) if any(r[0] == axis for r in a)]
        if not dims:
            break
        tid, d = link[0], dims[0]
    for key in path:
        memo[key] = root
    return root


def check_layout(problem: ShardingProblem, plan: Assignment, propagated: ShardingGraph,
                 argument_tensors: tuple[int, ...], spec: DeviceSpec) -> LayoutCheck:
    """The plan against the graph propagated from its arguments (``argument_tensors``:
    the graph's tensor of each entry argument, in order)."""
    sizes = problem.axis_sizes
    layout = list(plan.groups)
    differing = []
    reached: dict[tuple[int, int, str], int] = defaultdict(int)
    argument_of = {tid: i for i, tid in enumerate(argument_tensors)}
    memo: dict[tuple[int, int, str], tuple[int, int]] = {}
    for group in problem.groups:
        head = group.tensors[0]
        if propagated.tensors[head].shape != group.shape:
            raise ValueError(f"the propagated graph does not match the problem (tensor {head})")
        wanted = group.candidates[plan.groups[group.id]]
        have = sharding_labels(propagated.tensors[head].dims, sizes)
        if have == wanted:
            continue
        differing.append(group.id)
        if have in group.candidates:
            layout[group.id] = group.candidates.index(have)
        size = array_bytes(group.dtype, list(group.shape)) if prod(group.shape) else 0
        for d, axes in enumerate(have):
            for axis in (a for a in axes if a not in wanted[d]):
                tid, dim = _root(propagated, head, d, axis.split(":")[0], memo)
                if tid in argument_of:
                    reached[(argument_of[tid], dim, axis)] += size
    laid = tuple(layout)
    culprits = tuple(sorted(reached.items(), key=lambda kv: (-kv[1], kv[0])))
    return LayoutCheck(price_layout(problem, laid, spec), laid, tuple(differing), culprits)
