"""The sharding-choice problem as the solver sees it: value groups and their
candidate shardings, ops and their strategies, the cost of each choice, and how
to evaluate or narrow an assignment. ``problem.py`` builds it from a program;
``solve.py`` and ``refine.py`` solve it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TypeVar

from ..common.shapes import array_bytes
from ..hlo.step_time import collective_seconds
from ..models.device_spec import DeviceSpec

Sharding = tuple[tuple[str, ...], ...]  # per dimension, the mesh axes on it (in mesh order)

# Shardings flow forward, as propagation makes them flow from the arguments: an op
# cannot take an operand on an axis its producer did not shard it on, nor hand its
# consumers a result on an axis it did not compute it on (both would be a plan the
# program never compiles to). Axes enter at the arguments, and at factors only a
# result has (a broadcast's new dimensions, an iota), which any sharding may take;
# a sharding the program states (a constraint) reaches back to its producer.
FORBIDDEN = float("inf")

T = TypeVar("T")



@dataclass(frozen=True)
class ValueGroup:
    id: int
    tensors: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    candidates: tuple[Sharding, ...]
    unary: tuple[float, ...]  # seconds per candidate: the elementwise ops merged into it
    pinned: str | None = None  # what fixed its sharding


@dataclass(frozen=True)
class Use:
    """One tensor of an op: the sharding each strategy wants of it, and the cost of
    each (wanted, group candidate) pair."""

    group: int
    is_result: bool
    wanted: tuple[int, ...]  # per strategy, an index into `shardings`
    shardings: tuple[Sharding, ...]
    seconds: tuple[tuple[float, ...], ...]  # [wanted][group candidate]


@dataclass(frozen=True)
class OpChoice:
    step: int
    op: str
    strategies: tuple[tuple[tuple[str, ...], ...], ...]  # per strategy, per factor: its axes
    seconds: tuple[float, ...]  # compute and reductions
    reduce_seconds: tuple[float, ...]  # of which reductions
    uses: tuple[Use, ...]
    repeats: int


@dataclass(frozen=True)
class MemoryTerm:
    group: int
    path: str
    bytes: tuple[int, ...]  # per candidate, per device


@dataclass(frozen=True)
class ShardingProblem:
    axis_sizes: dict[str, int]
    free_axes: tuple[str, ...]
    groups: tuple[ValueGroup, ...]
    ops: tuple[OpChoice, ...]
    memory: tuple[MemoryTerm, ...]
    budget_bytes: int | None
    ties: tuple[tuple[int, int], ...]  # groups that must choose the same candidate (state in, state out)
    arguments: tuple[int, ...]  # the group of each entry argument
    results: tuple[int, ...]  # the group of each entry result

    @property
    def size(self) -> int:
        """Variables of the linear program: candidates, strategies and use pairs."""
        return (sum(len(g.candidates) for g in self.groups) + sum(len(o.strategies) for o in self.ops)
                + sum(len(u.shardings) * len(self.groups[u.group].candidates) for o in self.ops for u in o.uses))


@dataclass(frozen=True)
class Assignment:
    groups: tuple[int, ...]  # candidate index per group
    ops: tuple[int, ...]  # strategy index per op


def evaluate(problem: ShardingProblem, a: Assignment) -> tuple[float, int]:
    """(estimated seconds, per-device bytes of the arguments and results) of an assignment."""
    seconds = sum(g.unary[a.groups[g.id]] for g in problem.groups)
    for i, op in enumerate(problem.ops):
        s = a.ops[i]
        seconds += op.seconds[s]
        for use in op.uses:
            seconds += use.seconds[use.wanted[s]][a.groups[use.group]]
    memory = sum(m.bytes[a.groups[m.group]] for m in problem.memory)
    return seconds, memory


def breakdown(problem: ShardingProblem, a: Assignment) -> tuple[float, float, float]:
    """(compute, reductions, resharding) seconds of an assignment."""
    compute = sum(g.unary[a.groups[g.id]] for g in problem.groups)
    reduction = reshard = 0.0
    for i, op in enumerate(problem.ops):
        s = a.ops[i]
        compute += op.seconds[s] - op.reduce_seconds[s]
        reduction += op.reduce_seconds[s]
        reshard += sum(use.seconds[use.wanted[s]][a.groups[use.group]] for use in op.uses)
    return compute, reduction, reshard


def local_bytes(shape: tuple[int, ...], dtype: str, sharding: Sharding, sizes: dict[str, int]) -> int:
    return array_bytes(dtype, [n // prod(sizes[a] for a in axes) for n, axes in zip(shape, sharding)])


def reshard_seconds(shape: tuple[int, ...], dtype: str, src: Sharding, dst: Sharding, sizes: dict[str, int],
                    spec: DeviceSpec) -> float:
    """From ``src`` to ``dst``: an all-gather of the axes ``dst`` drops, an all-to-all of
    the axes that change dimension (or order); axes only ``dst`` has are a local slice."""
    if src == dst:
        return 0.0
    where_src = {a: d for d, axes in enumerate(src) for a in axes}
    where_dst = {a: d for d, axes in enumerate(dst) for a in axes}
    dropped = [a for a in where_src if a not in where_dst]
    moved = [a for a in where_src if a in where_dst and (where_src[a] != where_dst[a]
                                                         or src[where_src[a]] != dst[where_dst[a]])]
    seconds = 0.0
    if moved:
        seconds += collective_seconds("all-to-all", local_bytes(shape, dtype, src, sizes),
                                      prod(sizes[a] for a in moved), False, spec)
    if dropped:
        kept = tuple(tuple(a for a in axes if a not in dropped) for axes in src)
        seconds += collective_seconds("all-gather", local_bytes(shape, dtype, kept, sizes),
                                      prod(sizes[a] for a in dropped), False, spec)
    return seconds


def pin_groups(problem: ShardingProblem, pins: dict[int, Sharding]) -> ShardingProblem | None:
    """The problem with these groups restricted to one sharding each (None when a
    pin is not among a group's candidates: it uses an axis the solver does not)."""
    keep: dict[int, tuple[int, ...]] = {}
    for gid, sharding in pins.items():
        cands = problem.groups[gid].candidates
        if sharding not in cands:
            return None
        keep[gid] = (cands.index(sharding),)
    return dataclasses.replace(restrict_groups(problem, keep), budget_bytes=None)


def restrict_groups(problem: ShardingProblem, keep: dict[int, tuple[int, ...]]) -> ShardingProblem:
    """The problem with these groups' candidates cut to the ones at these indices
    (in their order); every table indexed by a group's candidates is cut alike."""

    def cut(gid: int, values: Sequence[T]) -> tuple[T, ...]:
        return tuple(values[i] for i in keep[gid]) if gid in keep else tuple(values)

    groups = tuple(ValueGroup(x.id, x.tensors, x.shape, x.dtype, cut(x.id, x.candidates), cut(x.id, x.unary),
                              x.pinned) for x in problem.groups)
    ops = tuple(OpChoice(o.step, o.op, o.strategies, o.seconds, o.reduce_seconds, tuple(
        Use(u.group, u.is_result, u.wanted, u.shardings, tuple(cut(u.group, row) for row in u.seconds))
        for u in o.uses), o.repeats) for o in problem.ops)
    memory = tuple(MemoryTerm(m.group, m.path, cut(m.group, m.bytes)) for m in problem.memory)
    ties = tuple((a, b) for a, b in problem.ties if groups[a].candidates == groups[b].candidates)
    return ShardingProblem(problem.axis_sizes, problem.free_axes, groups, ops, memory, problem.budget_bytes, ties,
                           problem.arguments, problem.results)
