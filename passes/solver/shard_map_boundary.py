"""A ``shard_map`` (``sdy.manual_computation``) in the sharding-choice problem.

The user wrote the manual region's specs: ``suggest`` keeps them and chooses
around them. Three kinds of step cross a region's edge, each an op with one
strategy per sharding of the spec's value group:

- **Entry** (an operand to its in_specs, both global): the operand's group
  pays the move to the spec; unlike an op's operand it may gain axes, as
  shard_map slices a replicated value on each device.
- **In** (the in_specs, global, to the body's argument, local) and **out** (the
  body's yielded value, local, to the result, global): the body sees the
  global sharding less the manual axes. Where the spec leaves a dimension open
  (a partial-manual ``axis_names=``), the free axes on it are the solver's to
  choose; crossing with another free-axis sharding costs its reshard on the
  local shape.

The manual axes themselves never change: a spec's group has them as written
(``problem.pinned_candidates``), and inside the body only the other axes can
shard a value (``Tensor.manual_axes``).
"""

from __future__ import annotations

from ..models.device_spec import DeviceSpec
from ..propagation.graph import ShardingGraph, Step
from .sharding_problem import FORBIDDEN, OpChoice, Sharding, Use, ValueGroup, reshard_seconds


def is_entry(step: Step) -> bool:
    """A shard_map operand's edge to its in_specs holder (global view)."""
    return step.is_edge and step.op == "sdy.manual_computation" and step.manual_axes is None


def is_boundary(step: Step) -> bool:
    """A shard_map boundary: (global view, body's view)."""
    return step.manual_axes is not None


def _local(sharding: Sharding, manual: frozenset[str]) -> Sharding:
    return tuple(tuple(a for a in axes if a not in manual) for axes in sharding)


def _same(spec_group: ValueGroup, n: int) -> tuple[tuple[float, ...], ...]:
    """A spec group's use: the strategy is its candidate, any other is not."""
    return tuple(tuple(0.0 if w == c else FORBIDDEN for c in range(len(spec_group.candidates))) for w in range(n))


def entry_op(step: Step, operand: ValueGroup, spec_group: ValueGroup, repeats: int, sizes: dict[str, int],
             spec: DeviceSpec, g: ShardingGraph) -> OpChoice:
    t = g.tensors[step.tensors[0]]
    wanted = spec_group.candidates
    into = tuple(tuple(repeats * reshard_seconds(t.shape, t.dtype, c, w, sizes, spec) for c in operand.candidates)
                 for w in wanted)
    n = len(wanted)
    uses = (Use(operand.id, False, tuple(range(n)), wanted, into),
            Use(spec_group.id, True, tuple(range(n)), wanted, _same(spec_group, n)))
    return OpChoice(step.id, step.op, tuple(wanted), (0.0,) * n, (0.0,) * n, uses, repeats)


def boundary_op(step: Step, outer: ValueGroup, inner: ValueGroup, repeats: int, sizes: dict[str, int],
                spec: DeviceSpec, g: ShardingGraph) -> OpChoice:
    """One strategy per sharding of the global side; the body's side pays the reshard
    from (in) or to (out) that sharding less the manual axes."""
    assert step.manual_axes is not None
    t = g.tensors[step.tensors[1]]  # the body's value: the local shape
    # An in_specs holder is a virtual tensor (it has no SSA value); a result is a real one.
    flows_in = g.tensors[step.tensors[0]].virtual
    local = tuple(_local(w, step.manual_axes) for w in outer.candidates)
    distinct = tuple(dict.fromkeys(local))
    table = tuple(tuple(repeats * reshard_seconds(t.shape, t.dtype, *((w, c) if flows_in else (c, w)), sizes, spec)
                        for c in inner.candidates) for w in distinct)
    n = len(outer.candidates)
    uses = (Use(outer.id, not flows_in, tuple(range(n)), outer.candidates, _same(outer, n)),
            Use(inner.id, flows_in, tuple(distinct.index(w) for w in local), distinct, table))
    return OpChoice(step.id, step.op, tuple(outer.candidates), (0.0,) * n, (0.0,) * n, uses, repeats)
