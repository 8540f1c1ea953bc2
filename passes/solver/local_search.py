"""The local search behind ``solve``'s fallback above the ILP's size limit:
iterated conditional modes from a few forward starts.

It starts from the assignment that fits the budget best and moves one op or one
group (with the groups tied to it) at a time to its cheapest choice given its
neighbours, until nothing improves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..models.errors import NoFeasibleSharding
from .sharding_problem import FORBIDDEN, Assignment, OpChoice, ShardingProblem, Use, ValueGroup, evaluate


def _memory(problem: ShardingProblem, groups: list[int]) -> int:
    return sum(m.bytes[groups[m.group]] for m in problem.memory)


def _replicated(g: ValueGroup) -> int:
    replicated = tuple(() for _ in g.shape)
    return g.candidates.index(replicated) if replicated in g.candidates else 0


def _starts(problem: ShardingProblem) -> list[dict[int, int]]:
    """Argument assignments to start from: replicated; state replicated and data on
    its leading dimension over every free axis (data parallel); every argument on
    its largest dimension over every free axis (FSDP)."""
    state = {a for a, _ in problem.ties}
    everything = set(problem.free_axes)

    def on(g: ValueGroup, dims: Sequence[int]) -> int:
        for d in dims:
            want = tuple(tuple(problem.free_axes) if k == d else () for k in range(len(g.shape)))
            if want in g.candidates:
                return g.candidates.index(want)
        return _replicated(g)

    starts: list[dict[int, int]] = [{}, {}, {}]
    for gid in set(problem.arguments):
        g = problem.groups[gid]
        if not g.shape or not everything:
            continue
        largest = sorted(range(len(g.shape)), key=lambda d: (-g.shape[d], d))
        starts[1][gid] = _replicated(g) if gid in state else on(g, [0])
        starts[2][gid] = on(g, largest) if gid in state else on(g, [0])
    return starts


def _forward(problem: ShardingProblem, start: dict[int, int], passes: int = 8) -> tuple[list[int], list[int]]:
    """In program order, each op takes its cheapest strategy given the groups decided
    so far, and its undecided results take the sharding it computes: shardings flow
    forward from the arguments, as the cost model requires. A group that a later
    producer cannot give the sharding an earlier one chose (a sum of a sharded and a
    concatenated gradient) is made replicated, which every producer can give, and
    the pass runs again."""
    pinned = dict(start)
    for _ in range(passes):
        groups, ops, conflicts = _forward_pass(problem, pinned)
        if not conflicts:
            break
        for gid in conflicts:
            pinned[gid] = _replicated(problem.groups[gid])
    return groups, ops


def _forward_pass(problem: ShardingProblem, start: dict[int, int]) -> tuple[list[int], list[int], set[int]]:
    groups: list[int | None] = [None] * len(problem.groups)
    for g in problem.groups:
        if len(g.candidates) == 1:
            groups[g.id] = 0
    for gid, c in start.items():
        groups[gid] = c
    for gid in problem.arguments:
        if groups[gid] is None:
            groups[gid] = _replicated(problem.groups[gid])
    for a, b in problem.ties:  # state comes back on the layout it came in on
        groups[b] = groups[a]
    ops: list[int] = []
    conflicts: set[int] = set()
    for op in problem.ops:
        def cost(s: int, op: OpChoice = op) -> float:
            total = op.seconds[s]
            for u in op.uses:
                c = groups[u.group]
                if c is not None:
                    total += u.seconds[u.wanted[s]][c]
                elif u.shardings[u.wanted[s]] not in problem.groups[u.group].candidates:
                    return FORBIDDEN
            return total

        best = min(range(len(op.strategies)), key=lambda s: (cost(s), s))
        ops.append(best)
        for u in op.uses:
            chosen = groups[u.group]
            if chosen is None:
                groups[u.group] = problem.groups[u.group].candidates.index(u.shardings[u.wanted[best]])
            elif u.seconds[u.wanted[best]][chosen] == FORBIDDEN and u.group not in start:
                conflicts.add(u.group)
    final = [c if c is not None else _replicated(problem.groups[i]) for i, c in enumerate(groups)]
    return final, ops, conflicts


def local_search(problem: ShardingProblem, max_rounds: int = 20) -> Assignment:
    """The best of iterated conditional modes from each forward start (``_starts``)."""
    best, last_error = None, None
    for start in _starts(problem):
        try:
            a = _improve(problem, *_forward(problem, start), max_rounds)
        except NoFeasibleSharding as e:
            last_error = e
            continue
        seconds = evaluate(problem, a)[0]
        if seconds == FORBIDDEN:  # a start that could not be made consistent
            continue
        if best is None or seconds < best[0]:
            best = (seconds, a)
    if best is None:
        raise last_error or NoFeasibleSharding("no assignment fits")
    return best[1]


def _improve(problem: ShardingProblem, groups: list[int], ops: list[int], max_rounds: int) -> Assignment:
    """Iterated conditional modes: one op, or one group with the groups tied to it, at
    a time to its cheapest choice given its neighbours, until nothing improves; a
    move that breaks the budget is taken only to bring an assignment over it down."""
    tied: dict[int, list[int]] = {g.id: [g.id] for g in problem.groups}
    for a, b in problem.ties:
        merged = sorted(set(tied[a]) | set(tied[b]))
        for m in merged:
            tied[m] = merged
    for members in {tuple(v) for v in tied.values()}:
        for m in members[1:]:
            groups[m] = groups[members[0]]
    uses_of: dict[int, list[tuple[int, Use]]] = {}
    for i, op in enumerate(problem.ops):
        for use in op.uses:
            uses_of.setdefault(use.group, []).append((i, use))

    def op_cost(i: int, s: int) -> float:
        op = problem.ops[i]
        return op.seconds[s] + sum(u.seconds[u.wanted[s]][groups[u.group]] for u in op.uses)

    def group_cost(members: Sequence[int], c: int) -> float:
        return sum(problem.groups[m].unary[c] + sum(u.seconds[u.wanted[ops[i]]][c] for i, u in uses_of.get(m, []))
                   for m in members)

    for _ in range(max_rounds):
        changed = False
        for i, op in enumerate(problem.ops):
            best = min(range(len(op.strategies)), key=lambda s: (op_cost(i, s), s))
            if op_cost(i, best) < op_cost(i, ops[i]) - 1e-15:
                ops[i], changed = best, True
        for members in sorted({tuple(v) for v in tied.values()}):
            here = groups[members[0]]
            for c in range(len(problem.groups[members[0]].candidates)):
                if group_cost(members, c) >= group_cost(members, here) - 1e-15:
                    continue
                trial = list(groups)
                for m in members:
                    trial[m] = c
                if problem.budget_bytes is None or _memory(problem, trial) <= problem.budget_bytes:
                    groups, here, changed = trial, c, True
        if problem.budget_bytes is not None and _memory(problem, groups) > problem.budget_bytes:
            # Over the budget: shard the argument or result that saves the most bytes per second added.
            changed = _shed_memory(problem, groups, tied, group_cost) or changed
        if not changed:
            break
    if problem.budget_bytes is not None and _memory(problem, groups) > problem.budget_bytes:
        raise NoFeasibleSharding("the local search found no assignment that fits the arguments and results in "
                                 "the budget")
    return Assignment(tuple(groups), tuple(ops))


def _shed_memory(problem: ShardingProblem, groups: list[int], tied: dict[int, list[int]],
                 group_cost: Callable[[Sequence[int], int], float]) -> bool:
    memory_groups = sorted({m.group for m in problem.memory})
    best = None
    for gid in memory_groups:
        members = tied[gid]
        here = groups[gid]
        base = _memory(problem, groups)
        for c in range(len(problem.groups[gid].candidates)):
            trial = list(groups)
            for m in members:
                trial[m] = c
            saved = base - _memory(problem, trial)
            if saved <= 0:
                continue
            added = group_cost(members, c) - group_cost(members, here)
            if added == FORBIDDEN:
                continue
            score = (added / saved, gid, c)
            if best is None or score < best[0]:
                best = (score, members, c)
    if best is None:
        return False
    for m in best[1]:
        groups[m] = best[2]
    return True
