"""Repeated layers share one strategy: unrolled layers found as repeats in the
ops' order, their decision variables tied, and the problem solved once per
repeated position.

An unrolled stack of identical layers lowers to the same sequence of ops, with
the same shapes, strategies and costs, once per layer (forward in order,
backward in reverse order, each a run of its own). An op equal to the op
``period`` steps later, in a run of at least ``period`` such ops (two whole
copies), is tied to it, except in the first and the last copy of the run
(their neighbours differ: the embedding before, the loss after); the groups of
its uses are tied to the partner's uses' groups, position by position. The
tied problem (``TiedProblem.problem``) has one group per class of tied groups
and one op per class of tied ops, each costing the sum of its members (the
pair tables of its uses summed alike), so any of its assignments, spread back
over the members (``expand``), costs the same on the original problem. It is a
restriction: its optimum is never below the untied one, and its LP bound
bounds the tied problem only. A scan's body is already one layer (its ops
count once per iteration), so there is nothing to tie.

Autoparallel (PyTorch's sharding solver) ties repeated layers the same way:
3.67M decision variables to 175K on LLaMA-3 8B over a 2-D mesh.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..common.union_find import UnionFind
from .sharding_problem import ShardingProblem
from .tied_problem import TiedProblem, tie_classes

MIN_PERIOD = 8  # ops per repeat: shorter runs are repeated ops inside a layer (q, k, v), not layers
MAX_ROUNDS = 8  # periods taken, most ops covered first (forward, backward, ...)


def _signatures(problem: ShardingProblem) -> np.ndarray:
    """Per op, an id equal for ops that are the same choice: kind, strategies, costs,
    and per use its tensor's shape, dtype and candidates and its costs."""
    ids: dict[tuple[object, ...], int] = {}
    out = []
    for op in problem.ops:
        key = (op.op, op.strategies, op.seconds, op.reduce_seconds, op.repeats, tuple(
            (problem.groups[u.group].shape, problem.groups[u.group].dtype, problem.groups[u.group].candidates,
             u.is_result, u.wanted, u.shardings, u.seconds) for u in op.uses))
        out.append(ids.setdefault(key, len(ids)))
    return np.array(out, dtype=np.int64)


def _runs(match: np.ndarray, period: int) -> list[tuple[int, int]]:
    """(start, end) of the runs of True at least ``period`` long."""
    padded = np.concatenate(([False], match, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2]) if e - s >= period]


def find_repeats(problem: ShardingProblem, free_ends: bool = True) -> list[tuple[int, int]]:
    """Pairs (op, the same op one repeat later) of the repeated runs in the ops' order;
    ``free_ends``: not in a run's first and last copy."""
    sig = _signatures(problem)
    n = len(sig)
    last: dict[int, int] = {}
    distances: Counter[int] = Counter()
    for i, s in enumerate(sig.tolist()):
        if s in last and i - last[s] >= MIN_PERIOD:
            distances[i - last[s]] += 1
        last[s] = i
    free = np.ones(n, dtype=bool)
    pairs: list[tuple[int, int]] = []
    periods = sorted(p for p, count in distances.items() if count >= MIN_PERIOD and 2 * p <= n)
    for _ in range(MAX_ROUNDS):
        best = None
        for p in periods:
            match = (sig[:-p] == sig[p:]) & free[:-p] & free[p:]
            runs = _runs(match, p)
            covered = sum(e - s + p for s, e in runs)
            if runs and (best is None or covered > best[0]):
                best = (covered, p, runs)
        if best is None:
            break
        _, p, runs = best
        for s, e in runs:
            # The first and the last copy stay free: their neighbours differ (the embedding before the first
            # layer, the loss after the last); tying them cost +0.06% at 8 layers on 1-D, +0% free.
            pairs.extend((i, i + p) for i in (range(s + p, e - p) if free_ends else range(s, e)))
            free[s:e + p] = False
    return pairs


def tie_repeats(problem: ShardingProblem, free_ends: bool = True) -> TiedProblem | None:
    """The problem with its repeated layers tied; None when it has none."""
    pairs = find_repeats(problem, free_ends)
    if not pairs:
        return None
    ops_uf, groups_uf = UnionFind(len(problem.ops)), UnionFind(len(problem.groups))
    for i, j in pairs:
        ops_uf.union(i, j)
        for u, v in zip(problem.ops[i].uses, problem.ops[j].uses):
            groups_uf.union(u.group, v.group)
    periods = tuple(sorted({j - i for i, j in pairs}))
    return tie_classes(problem, [groups_uf.find(g) for g in range(len(problem.groups))],
                       [ops_uf.find(i) for i in range(len(problem.ops))], periods)
