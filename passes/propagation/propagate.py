"""Sharding propagation in Python over Shardy's factor rules.

The algorithm is generic over factors: each step projects its tensors'
dimension shardings onto the rule's factors, picks one sharding per factor, and
projects it back onto every tensor that can take it. There are no per-op
tables: op semantics come from ``sdy-populate-op-sharding-rules``.

Conflict policy, in Shardy's documented hierarchy:

1. user priorities: in round ``i`` only dimension shardings with priority
   ``<= i`` (or none) act as seeds; a dimension with a later priority is not
   overwritten before its round;
2. op priority: Shardy's five-level schedule (see ``direction``), each level
   run to a fixpoint;
3. Shardy's aggressive strategy per step: per factor the longest sharding every
   tensor is compatible with (one is a prefix of the other); results before
   operands, each tensor takes it factor by factor, the factor whose source
   tensor is largest first, truncated where it conflicts within the factor for
   that tensor or with the tensor's other factors; tensors that conflict keep
   their sharding: that is where communication is predicted;
4. never: an axis twice in one tensor, an explicitly replicated axis, a change to
   a closed dimension, propagation along a need-replication or blocked factor.

Shardings only grow, so the fixpoint is reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod

from ..common.axes import (
    Axes,
    AxisRef,
    compatible_major,
    is_prefix,
    is_prefix_axis,
    join_factors,
    overlaps,
    prefix_without_overlap,
    size_of,
    split_for_factors,
)
from .function_boundaries import common_mesh, export_boundaries
from .graph import ShardingGraph, Step, Tensor

MAX_SWEEPS = 64


@dataclass(frozen=True)
class PropagationStats:
    rounds: int
    sweeps: int
    step_visits: int


BOTH, FORWARD, BACKWARD, NONE = "both", "forward", "backward", "none"
_PASS_THROUGH_OPS = ("stablehlo.reshape", "stablehlo.transpose")
_FORWARD_ONLY_OPS = ("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")
LEVELS = 5


def _union(a: str, b: str) -> str:
    if a == b or b == NONE:
        return a
    if a == NONE:
        return b
    return BOTH


def _pass_through_factor(step: Step, f: int) -> bool:
    return all(any(f in fs for fs in dims) for dims in step.rule.maps) and f not in step.rule.reduction


def direction(step: Step, f: int, level: int) -> str:
    """Shardy's op-priority schedule (``opPropagationSchedule``), cumulative over levels:
    0: elementwise ops, reshapes, transposes and data-flow edges both ways, dynamic
       slices forward, but none of them where an operand has several uses;
    1: the same whatever the uses;
    2: also the pass-through factors of any op (broadcasts only backward);
    3: every op, broadcasts only backward;
    4: everything, both ways."""
    if step.allowed_direction is not None:
        return step.allowed_direction
    out = NONE
    pass_through = step.is_edge or step.rule.pass_through or step.op in _PASS_THROUGH_OPS
    if level >= 1 or not step.multi_use:
        if pass_through:
            out = BOTH
        elif step.op in _FORWARD_ONLY_OPS:
            out = FORWARD
    broadcast = step.op == "stablehlo.broadcast_in_dim"
    if level >= 2 and _pass_through_factor(step, f):
        out = _union(out, BACKWARD if broadcast else BOTH)
    if level >= 3:
        out = _union(out, BACKWARD if broadcast else BOTH)
    if level >= 4:
        out = BOTH
    return out


def direction_table(steps: list[Step]) -> list[list[tuple[str, ...]]]:
    """Per step, per level, each factor's direction: computed once, read on every visit."""
    return [[tuple(direction(s, f, level) for f in range(len(s.rule.factor_sizes))) for level in range(LEVELS)]
            for s in steps]


def _projection(g: ShardingGraph, step: Step) -> tuple[list[dict[int, Axes]], list[set[int]]]:
    """Per tensor of the step: each factor's axes, and the factors that cannot take
    a new axis (those of a closed dimension, and of a dimension whose axes
    overflow its factors: the factors took less of them than it has)."""
    rule = step.rule
    out, fixed_out = [], []
    for tid, dims in zip(step.tensors, rule.maps):
        t = g.tensors[tid]
        per: dict[int, Axes] = {}
        fixed: set[int] = set()
        for d, factors in enumerate(dims):
            if not factors or d >= len(t.dims):
                continue
            parts = split_for_factors(t.dims[d], [rule.factor_sizes[x] for x in factors])
            per.update(zip(factors, parts))
            if t.closed[d] or size_of(tuple(r for part in parts for r in part)) < size_of(t.dims[d]):
                fixed.update(factors)
        out.append(per)
        fixed_out.append(fixed)
    return out, fixed_out


def _minor_most(step: Step, k: int, f: int) -> bool:
    return any(fs and fs[-1] == f for fs in step.rule.maps[k])


def _truncate(axes: Axes, keep) -> Axes:
    """Keep axes while ``keep(axis, sharded_size)`` accepts them; an axis it
    shortens ends the list."""
    out: list[AxisRef] = []
    size = 1
    for ref in axes:
        size *= ref[2]
        new = keep(ref, size)
        if new is None:
            break
        out.append(new)
        if new != ref:
            break
    return tuple(out)


def _factor_axes(g: ShardingGraph, step: Step, proj, ways: tuple[str, ...], round_priority: int | None) -> list[Axes]:
    rule = step.rule
    n_ops = step.n_operands
    result: list[Axes] = []
    for f in range(len(rule.factor_sizes)):
        way = NONE if f in rule.blocked else ways[f]
        if way == NONE:
            result.append(())
            continue
        order = list(range(len(step.tensors)))
        first = order[:n_ops] if way != BACKWARD else order[n_ops:]
        second = order[n_ops:] if way != BACKWARD else order[:n_ops]
        axes, can = (), True
        for k in first:
            if f in proj[k] and (round_priority is None or _dims_active(g, step.tensors[k], step, f, round_priority)):
                axes, can = compatible_major(axes, proj[k][f], can)
        if way != BOTH:
            can = False
        for k in second:
            if f in proj[k] and (round_priority is None or _dims_active(g, step.tensors[k], step, f, round_priority)):
                axes, can = compatible_major(axes, proj[k][f], can)
        result.append(axes)
    return result


def _within_factor(g: ShardingGraph, step: Step, k: int, f: int, axes: Axes, existing: Axes, fixed: set[int]) -> Axes:
    """Shardy's ``compatiblePrefixNoConflictsWithinFactor`` for one tensor (the
    aggressive strategy resolves these per tensor): the candidate axes less what
    the tensor replicates, and, where its factor cannot take a new axis (a closed
    dimension, overflowing axes), only what it already holds; otherwise only the
    part of an axis that divides what is left of a major factor."""
    t = g.tensors[step.tensors[k]]
    factor_size = step.rule.factor_sizes[f]

    def keep(ref, size):
        for r in t.replicated:
            ref = prefix_without_overlap(ref, r)
            if ref is None:
                return None
        if any(is_prefix_axis(ref, e) for e in existing):
            return ref
        if f not in fixed:
            if _minor_most(step, k, f):
                return ref
            prev = size // ref[2]
            if factor_size % prev == 0:
                part = gcd(factor_size // prev, ref[2])
                if part == ref[2]:
                    return ref
                if part != 1:
                    return (ref[0], ref[1], part)
        if existing and is_prefix_axis(existing[-1], ref):
            return existing[-1]
        return None
    return _truncate(axes, keep)


def _active(t: Tensor, d: int, round_priority: int | None) -> bool:
    p = t.priority[d]
    return round_priority is None or p is None or p <= round_priority


def _apply(g: ShardingGraph, step: Step, ways: tuple[str, ...], round_priority: int | None) -> bool:
    """One propagation step; ``round_priority`` is None when the program states no
    priorities (every sharding takes part)."""
    if not any(any(g.tensors[t].dims) for t in step.tensors) or all(w == NONE for w in ways):
        return False
    mesh = common_mesh(g, step)
    if mesh is False:
        return False
    if step.manual_axes is not None:
        changed = _apply_manual_boundary(g, step)
    else:
        changed = _apply_rule(g, step, ways, round_priority)
    if changed and mesh is not None:
        for tid in step.tensors:
            t = g.tensors[tid]
            if (t.mesh is None or not t.mesh.axes) and any(t.dims):
                t.mesh = mesh
    return changed


_ELEMENTWISE_SDY_OPS = ("sdy.sharding_constraint", "sdy.propagation_barrier", "sdy.reshard")


def _factor_order(g: ShardingGraph, step: Step, proj, candidates: list[Axes], elementwise: bool) -> list[int]:
    """Shardy's aggressive order of factors: the largest source tensor first (a
    tensor that already holds the candidate axes; its size is the product of its
    factors), then for elementwise ops the most sharded factor, then the earliest
    source tensor, then the factor index."""
    sizes = step.rule.factor_sizes
    source = [(-1, -1)] * len(sizes)  # (tensor size, tensor index)
    for k, per in enumerate(proj):
        tensor_size = prod(sizes[f] for f in per)
        for f, axes in per.items():
            if candidates[f] and is_prefix(candidates[f], axes) and tensor_size > source[f][0]:
                source[f] = (tensor_size, k)
    return sorted(range(len(sizes)), key=lambda f: (
        -source[f][0], -size_of(candidates[f]) if elementwise else 0, source[f][1], f))


def _apply_rule(g: ShardingGraph, step: Step, ways: tuple[str, ...], round_priority: int | None) -> bool:
    """Shardy's aggressive factor propagation: per factor the axes every tensor is
    compatible with; then results before operands, each tensor takes them factor
    by factor in ``_factor_order``, truncated where they conflict within the
    factor (for this tensor) or with its other factors (as updated so far); an
    elementwise op's operand takes no more than a result holds."""
    rule = step.rule
    proj, fixed = _projection(g, step)
    candidates = _factor_axes(g, step, proj, ways, round_priority)
    if not any(candidates):
        return False
    elementwise = not step.is_edge and rule.pass_through or step.op in _ELEMENTWISE_SDY_OPS
    order = _factor_order(g, step, proj, candidates, elementwise)
    n_ops = step.n_operands
    updated = [dict(per) for per in proj]
    for k in [*range(n_ops, len(step.tensors)), *range(n_ops)]:
        t = g.tensors[step.tensors[k]]
        per = updated[k]
        held = {r for axes in t.dims for r in axes}
        for f in order:
            if f not in per or not candidates[f]:
                continue
            new = _within_factor(g, step, k, f, candidates[f], per[f], fixed[k])
            if not (is_prefix(per[f], new) and len(new) > len(per[f])):
                continue
            others = [r for f2, axes in per.items() if f2 != f for r in axes] + \
                [r for r in held if r not in per[f]]
            new = _truncate(new, lambda ref, _size, others=others: _without_overlap(ref, others))
            if elementwise and k < n_ops:
                for res in updated[n_ops:]:
                    if f in res and is_prefix(res[f], new) and len(new) > len(res[f]):
                        new = res[f]
            if is_prefix(per[f], new) and len(new) > len(per[f]):
                per[f] = new
    changed = False
    for k, (tid, dims) in enumerate(zip(step.tensors, rule.maps)):
        t = g.tensors[tid]
        for d, factors in enumerate(dims):
            if not factors or (not _active(t, d, round_priority) and t.dims[d]):
                continue
            if all(updated[k].get(f, ()) == proj[k].get(f, ()) for f in factors):
                continue
            new = join_factors([updated[k].get(f, ()) for f in factors], [rule.factor_sizes[f] for f in factors])
            changed |= _grow(t, d, new, step,
                             lambda f=factors, tid=tid: _source_tensor(g, step, proj, f, candidates, tid))
    return changed


def _without_overlap(ref: AxisRef, others) -> AxisRef | None:
    for other in others:
        ref = prefix_without_overlap(ref, other)
        if ref is None:
            return None
    return ref


def _grow(t: Tensor, d: int, new: Axes, step: Step, source_of) -> bool:
    """Extend dimension ``d`` of ``t`` to ``new`` where it only adds axes that are
    free in the tensor (not on another dimension, not replicated); the parent link
    names ``source_of()``, asked only when the dimension grew."""
    if t.closed[d] or new == t.dims[d] or not is_prefix(t.dims[d], new):
        return False
    others = [r for e, axes in enumerate(t.dims) if e != d for r in axes]
    keep = list(t.dims[d])
    for ref in new[len(t.dims[d]):]:
        if any(overlaps(ref, o) for o in others) or any(overlaps(ref, r) for r in t.replicated):
            break
        keep.append(ref)
    if tuple(keep) == t.dims[d]:
        return False
    t.dims[d] = tuple(keep)
    source = source_of()
    t.parent[d] = (source, step.id) if source is not None else None
    return True


def _apply_manual_boundary(g: ShardingGraph, step: Step) -> bool:
    """A shard_map boundary: the body's dimension is the global one less the manual
    axes; free axes the body gains are appended after the manual ones outside."""
    outer, inner = (g.tensors[t] for t in step.tensors)
    manual = step.manual_axes
    changed = False
    for d in range(len(outer.dims)):
        manual_part = tuple(r for r in outer.dims[d] if r[0] in manual)
        free_part = tuple(r for r in outer.dims[d] if r[0] not in manual)
        changed |= _grow(inner, d, free_part, step, lambda: outer.id)
        changed |= _grow(outer, d, manual_part + inner.dims[d], step, lambda: inner.id)
    return changed


def _source_tensor(g: ShardingGraph, step: Step, proj, factors, chosen, receiver: int) -> int | None:
    """The tensor of the step that already held the axes the receiver took."""
    for f in factors:
        if not chosen[f]:
            continue
        for k, tid in enumerate(step.tensors):
            if tid != receiver and f in proj[k] and proj[k][f] and is_prefix(chosen[f], proj[k][f]):
                return tid
        for k, tid in enumerate(step.tensors):
            if tid != receiver and f in proj[k] and proj[k][f]:
                return tid
    return None


def _dims_active(g: ShardingGraph, tid: int, step: Step, factor: int, round_priority: int) -> bool:
    t = g.tensors[tid]
    dims = step.rule.maps[step.tensors.index(tid)]
    return all(_active(t, d, round_priority) for d, fs in enumerate(dims) if factor in fs)


def _fixpoint(g: ShardingGraph, level: int, round_priority: int | None, users: list[list[int]], table,
              stats: list[int], live: set[int] | None = None) -> set[int]:
    """Sweep the steps in order until nothing changes, then only steps touching a changed tensor; the first
    sweep skips steps not ``live`` (inert: tensors' dims and meshes, directions unchanged since last visit)."""
    dirty, carry, live = set(range(len(g.steps))), set[int](), live if live is not None else set(range(len(g.steps)))
    for sweep in range(MAX_SWEEPS):
        if not dirty:
            return carry
        todo, dirty = sorted(dirty), set()
        stats[0], stats[1] = stats[0] + 1, stats[1] + len(todo)  # a skipped step counts as visited
        for sid in todo:  # a step made live during the first sweep is visited in it
            if sweep == 0 and sid not in live:
                continue
            step = g.steps[sid]
            before = [(g.tensors[t].dims[:], g.tensors[t].mesh) for t in step.tensors]
            if _apply(g, step, table[sid][level], round_priority):
                for t, (old, mesh) in zip(step.tensors, before):
                    if (changed := g.tensors[t].dims != old) or g.tensors[t].mesh is not mesh:
                        (dirty if changed else carry).update(users[t])  # a mesh alone: no sweep revisits
                        live.update(users[t])
    return carry | dirty


def propagate(g: ShardingGraph) -> PropagationStats:
    """Propagate shardings over the graph in place."""
    stated = sorted({p for t in g.tensors for p in t.priority if p is not None})
    priorities: list[int | None] = list(stated) if stated else [None]
    table = direction_table(g.steps)
    users: list[list[int]] = [[] for _ in g.tensors]
    for step in g.steps:
        for t in set(step.tensors):
            users[t].append(step.id)
    stats = [0, 0]
    for p in priorities:
        carry: set[int] | None = None  # a new priority: every step is live
        for level in range(LEVELS):
            carry = _fixpoint(g, level, p, users, table, stats, None if carry is None else carry | {
                sid for sid, ways in enumerate(table) if ways[level] != ways[level - 1]})
    export_boundaries(g)
    return PropagationStats(rounds=len(priorities), sweeps=stats[0], step_visits=stats[1])
