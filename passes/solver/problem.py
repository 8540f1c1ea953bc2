"""The sharding-choice problem of a program: candidate shardings per value, the
cost of each, and the cost of moving between them, priced with the step-time
model (``step_time``), for ``suggest`` to solve.

Built from the ``ShardingGraph`` (Shardy's factor rules on every op):

- **Value groups.** Tensors a data-flow edge ties together (a loop carry, a call's
  argument, a constraint's operand) and tensors an elementwise op maps one to one
  (same shape, every factor on the same dimension) are one group: they take one
  sharding. A group's candidates are every way to put each free mesh axis on one
  of its dimensions (in mesh order) or on none, where the dimension divides; a
  group the program pins (a ``with_sharding_constraint``, an argument the user
  fixed) has its one sharding. The elementwise ops merged into a group cost
  their bytes over HBM bandwidth divided by the sharding's parallelism.
- **Op strategies.** Every other op (dot_general, reduce, broadcast, reshape,
  gather, ...) chooses an assignment of free mesh axes to its factors: each axis
  on at most one factor, a factor only where it divides, never a factor Shardy
  marks need-replication or blocked, and only a dimension's major factor (a
  minor one would be a strided sharding). A strategy costs its FLOPs and bytes
  over the device's peaks divided by its parallelism, plus an all-reduce of the
  result over the axes on reduction factors.
- **Uses.** Each tensor of an op is a use: the strategy implies a sharding of the
  tensor; going from the group's sharding to it (an operand) or from it to the
  group's (a result) costs an all-gather of the axes dropped, an all-to-all of
  the axes that move between dimensions; adding an axis is a local slice (free).

Everything inside a loop body counts once per iteration (the trip count of a
``while`` whose condition compares its counter with a constant, as ``scan``
lowers). Memory is the per-device bytes of the entry arguments and results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from math import prod

from ..common.union_find import UnionFind
from ..hlo.step_time import collective_seconds
from ..models.device_spec import DeviceSpec
from ..propagation.graph import ShardingGraph, Step
from . import shard_map_boundary
from .fused_traffic import FusedTraffic
from .sharding_problem import (
    FORBIDDEN,
    MemoryTerm,
    OpChoice,
    Sharding,
    ShardingProblem,
    Use,
    ValueGroup,
    local_bytes,
    reshard_seconds,
)

# Above this many candidate strategies an op keeps the ones with the most parallelism
# (and the replicated one): a 3-D mesh on a 5-factor dot_general has 216.
MAX_STRATEGIES = 64
# Candidates per value group, likewise (the rest are pruned, see tensor_candidates).
MAX_CANDIDATES = 16


def pinned_candidates(shape: tuple[int, ...], stated: Sharding, open_dims: tuple[int, ...],
                      free_axes: tuple[str, ...], sizes: dict[str, int]) -> list[Sharding]:
    """A stated sharding, and where it leaves dimensions open, each way of adding the
    free axes it does not use to them (after the stated axes, as propagation appends)."""
    out = [stated]
    if not open_dims:
        return out
    used = {a for axes in stated for a in axes}
    extra = tuple(a for a in free_axes if a not in used)
    for c in tensor_candidates(tuple(shape[d] if d in open_dims else 1 for d in range(len(shape))), extra, sizes):
        merged = tuple(tuple(stated[d]) + tuple(c[d]) for d in range(len(shape)))
        if merged not in out and all(n % prod(sizes[a] for a in axes) == 0 for n, axes in zip(shape, merged)):
            out.append(merged)
    return out


def _adds_axis(src: Sharding, dst: Sharding) -> bool:
    """Whether ``dst`` shards on an axis ``src`` does not have."""
    have = {a for axes in src for a in axes}
    return any(a not in have for axes in dst for a in axes)


def tensor_candidates(shape: tuple[int, ...], free_axes: tuple[str, ...], sizes: dict[str, int]) -> list[Sharding]:
    """Each free axis on one dimension or none, where the dimension divides."""
    out = []
    for placement in product(range(-1, len(shape)), repeat=len(free_axes)):
        dims = [tuple(a for a, d in zip(free_axes, placement) if d == k) for k in range(len(shape))]
        if all(n % prod(sizes[a] for a in axes) == 0 for n, axes in zip(shape, dims)):
            out.append(tuple(dims))
    if len(out) > MAX_CANDIDATES:
        # Keep the replicated one, every axis alone on each dimension, all axes on one
        # dimension, then the most parallel of the rest (a 3-D mesh on a rank-4 value has 125).
        def rank(c: Sharding) -> tuple:
            used = [a for axes in c for a in axes]
            simple = len(used) <= 1 or sum(1 for axes in c if axes) == 1
            return (bool(used), not simple, -prod(sizes[a] for a in used), out.index(c))
        keep = set(sorted(out, key=rank)[:MAX_CANDIDATES])
        out = [c for c in out if c in keep]  # in enumeration order, replicated first
    return out


def _merges(g: ShardingGraph, step: Step) -> bool:
    """Whether a step ties its tensors into one group: a data-flow edge, or an
    elementwise op whose tensors all have one shape."""
    if shard_map_boundary.is_boundary(step) or shard_map_boundary.is_entry(step):
        return False
    if step.is_edge:
        return True
    shapes = {g.tensors[t].shape for t in step.tensors}
    return step.rule.pass_through and len(shapes) == 1


def _axes_in_scope(free_axes: tuple[str, ...], manual_axes: frozenset[str]) -> tuple[str, ...]:
    """The free axes that can shard a value further: inside a shard_map body, the
    manual axes already split it (its shape is the local one) and stay as written."""
    return tuple(a for a in free_axes if a not in manual_axes)


def _strategies(step: Step, free_axes: tuple[str, ...], sizes: dict[str, int]) -> list[tuple[tuple[str, ...], ...]]:
    rule = step.rule
    n = len(rule.factor_sizes)
    shardable = set(range(n)) - rule.need_replication - rule.blocked
    for dims in rule.maps:
        for factors in dims:
            shardable -= set(factors[1:])  # a minor factor of a dimension: a strided sharding
    options = [-1] + sorted(f for f in shardable if rule.factor_sizes[f] > 1)
    out = []
    for placement in product(options, repeat=len(free_axes)):
        per = tuple(tuple(a for a, f in zip(free_axes, placement) if f == k) for k in range(n))
        if all(rule.factor_sizes[f] % prod(sizes[a] for a in axes) == 0 for f, axes in enumerate(per)):
            out.append(per)
    if len(out) > MAX_STRATEGIES:
        out.sort(key=lambda per: -prod(sizes[a] for axes in per for a in axes))
        out = [out[-1]] + out[: MAX_STRATEGIES - 1]  # the replicated one (last) and the most parallel
    return out


def _implied(step: Step, k: int, per: tuple[tuple[str, ...], ...]) -> Sharding:
    return tuple(tuple(a for f in factors for a in per[f]) for factors in step.rule.maps[k])


def _flops(step: Step, g: ShardingGraph) -> float:
    if step.op in ("stablehlo.dot_general", "stablehlo.convolution"):
        return 2.0 * prod(step.rule.factor_sizes)
    return float(prod(g.tensors[step.tensors[-1]].shape))


def _compute_seconds(step: Step, g: ShardingGraph, per, sizes, spec: DeviceSpec, moved: int) -> float:
    parallel = prod(sizes[a] for axes in per for a in axes)
    dtype = g.tensors[step.tensors[0]].dtype
    return max(_flops(step, g) / spec.peak(dtype), moved / spec.hbm_bytes_per_s) / parallel


@dataclass(frozen=True)
class ProblemInput:
    """What the problem is built from besides the graph."""

    free_axes: tuple[str, ...]
    axis_sizes: dict[str, int]  # the mesh's axes, and the sub-axes pinned shardings use ("x:(1)2")
    spec: DeviceSpec
    repeats: dict[int, int]  # tensor id -> how many times its defining op runs per step
    arguments: tuple[int, ...]  # entry argument tensor ids
    results: tuple[int, ...]  # entry result tensor ids (the returned values)
    argument_paths: tuple[str, ...]
    result_paths: tuple[str, ...]
    pinned: dict[int, tuple[Sharding, str]]  # tensor id -> (sharding, why)
    ties: tuple[tuple[int, int], ...]  # (argument index, result index) of state coming back
    result_donated: tuple[bool, ...]  # a result whose buffer is a donated argument's: no memory of its own
    budget_bytes: int | None
    # tensor id -> the dimensions of its pinned sharding that are open (``{"x", ?}``):
    # free axes may be added there, the stated ones stay.
    open_dims: dict[int, tuple[int, ...]] = field(default_factory=dict)


def build_problem(g: ShardingGraph, inp: ProblemInput) -> ShardingProblem:
    sizes = dict(inp.axis_sizes)
    uf = UnionFind(len(g.tensors))
    for step in g.steps:
        if _merges(g, step):
            for t in step.tensors[1:]:
                uf.union(step.tensors[0], t)
    roots = sorted({uf.find(t.id) for t in g.tensors})
    gid = {r: i for i, r in enumerate(roots)}
    members: list[list[int]] = [[] for _ in roots]
    for t in g.tensors:
        members[gid[uf.find(t.id)]].append(t.id)
    pins: dict[int, tuple[Sharding, str]] = {}
    open_dims: dict[int, tuple[int, ...]] = {}
    for tid, pin in inp.pinned.items():
        pins.setdefault(gid[uf.find(tid)], pin)
        open_dims.setdefault(gid[uf.find(tid)], inp.open_dims.get(tid, ()))
    blocked: dict[int, frozenset[str]] = {}  # axes a group may not gain: a shard_map spec's manual ones
    for step in g.steps:
        if step.manual_axes is not None:  # a shard_map boundary: its global side keeps the manual axes as written
            outer = gid[uf.find(step.tensors[0])]
            blocked[outer] = blocked.get(outer, frozenset()) | step.manual_axes

    groups: list[ValueGroup] = []
    unary: list[dict[Sharding, float]] = []
    for i, tids in enumerate(members):
        head = g.tensors[tids[0]]
        free = _axes_in_scope(inp.free_axes, head.manual_axes | blocked.get(i, frozenset()))
        if i in pins:
            candidates = pinned_candidates(head.shape, pins[i][0], open_dims[i], free, sizes)
        else:
            candidates = tensor_candidates(head.shape, free, sizes)
        groups.append(ValueGroup(i, tuple(tids), head.shape, head.dtype, tuple(candidates), (),
                                 pins[i][1] if i in pins else None))
        unary.append(dict.fromkeys(candidates, 0.0))

    traffic = FusedTraffic(g, inp.results)
    ops: list[OpChoice] = []
    tables: dict[tuple[object, ...], tuple[tuple[float, ...], ...]] = {}
    for step in g.steps:
        repeats = max(1, inp.repeats.get(step.tensors[-1], 1))
        if shard_map_boundary.is_entry(step) or shard_map_boundary.is_boundary(step):
            outer, inner = (groups[gid[uf.find(t)]] for t in step.tensors)
            build = shard_map_boundary.entry_op if shard_map_boundary.is_entry(step) else shard_map_boundary.boundary_op
            ops.append(build(step, outer, inner, repeats, sizes, inp.spec, g))
            continue
        if step.is_edge:
            continue
        if _merges(g, step):
            group = groups[gid[uf.find(step.tensors[0])]]
            moved = traffic.bytes(step)
            for c in group.candidates:
                parallel = prod(sizes[a] for axes in c for a in axes)
                unary[group.id][c] += repeats * moved / inp.spec.hbm_bytes_per_s / parallel
            continue
        strategies = _strategies(step, _axes_in_scope(inp.free_axes, g.tensors[step.tensors[0]].manual_axes), sizes)
        seconds, reductions = [], []
        moved = traffic.bytes(step)
        for per in strategies:
            s = _compute_seconds(step, g, per, sizes, inp.spec, moved)
            reduced = tuple(a for f in step.rule.reduction for a in per[f])
            r = 0.0
            if reduced:
                result = g.tensors[step.tensors[step.n_operands]]
                r = collective_seconds("all-reduce", local_bytes(result.shape, result.dtype,
                                                                  _implied(step, step.n_operands, per), sizes),
                                       prod(sizes[a] for a in reduced), False, inp.spec)
            seconds.append(repeats * (s + r))
            reductions.append(repeats * r)
        uses = []
        for k, tid in enumerate(step.tensors):
            t = g.tensors[tid]
            group = groups[gid[uf.find(tid)]]
            implied = [_implied(step, k, per) for per in strategies]
            distinct = list(dict.fromkeys(implied))
            index = {s: j for j, s in enumerate(distinct)}
            is_result = k >= step.n_operands
            # Repeated layers ask for the same tables again and again: each is priced once.
            key = (tuple(t.shape), t.dtype, tuple(distinct), group.candidates, is_result, bool(group.pinned),
                   repeats)
            table = tables.get(key)
            if table is None:
                table = tables[key] = tuple(
                    tuple(FORBIDDEN if (_adds_axis(w, c) and not group.pinned if is_result else _adds_axis(c, w))
                          else repeats * reshard_seconds(t.shape, t.dtype, *((w, c) if is_result else (c, w)),
                                                         sizes, inp.spec)
                          for c in group.candidates)
                    for w in distinct)
            uses.append(Use(group.id, is_result, tuple(index[s] for s in implied), tuple(distinct), table))
        ops.append(OpChoice(step.id, step.op, tuple(strategies), tuple(seconds), tuple(reductions), tuple(uses),
                              repeats))

    groups = [ValueGroup(x.id, x.tensors, x.shape, x.dtype, x.candidates,
                         tuple(unary[x.id][c] for c in x.candidates), x.pinned) for x in groups]
    memory = []
    seen: set[int] = set()
    for tid, path in zip(inp.arguments, inp.argument_paths):
        group = groups[gid[uf.find(tid)]]
        memory.append(MemoryTerm(group.id, path, tuple(local_bytes(group.shape, group.dtype, c, sizes)
                                                       for c in group.candidates)))
        seen.add(tid)
    for tid, path, donated in zip(inp.results, inp.result_paths, inp.result_donated):
        if donated or tid in seen:
            continue  # a donated buffer, or an argument returned as it is: no second copy
        group = groups[gid[uf.find(tid)]]
        memory.append(MemoryTerm(group.id, path, tuple(local_bytes(group.shape, group.dtype, c, sizes)
                                                       for c in group.candidates)))
    arg_groups = tuple(gid[uf.find(t)] for t in inp.arguments)
    res_groups = tuple(gid[uf.find(t)] for t in inp.results)
    ties = tuple(sorted({(arg_groups[a], res_groups[r]) for a, r in inp.ties
                         if arg_groups[a] != res_groups[r]
                         and groups[arg_groups[a]].candidates == groups[res_groups[r]].candidates}))
    return ShardingProblem(sizes, inp.free_axes, tuple(groups), tuple(ops), tuple(memory), inp.budget_bytes,
                           ties, arg_groups, res_groups)
