"""Communication that the propagated shardings imply, op by op, before XLA
compiles anything.

For each op with a factor rule, each factor's sharding on the results is what
the op computes in; an operand holding the factor on other axes must change:

- operand sharded on axes the result is not: an all-gather of those axes;
- operand and result sharded on different axes: an all-to-all (a reshard);
- a reduction factor sharded on an operand: an all-reduce of the result over
  those axes (XLA may emit it as a reduce-scatter); where an operand splits
  the result's rows on the same axis (a gather whose indices are split on the
  axis its operand is indexed along), an all-gather of the operand's
  dimension instead;
- a need-replication factor (a concatenate's or sort's dimension) sharded: an
  all-gather.

Data-flow edges whose members disagree (a reshard or sharding constraint, a loop
carry that comes back on another layout, a result pinned by out_shardings) change
the value's layout: the collectives of the axes that change (layout_change.py).
"""

from __future__ import annotations

from ..common.axes import Axes, AxisRef, label, size_of, split_for_factors
from ..common.device_groups import MeshInfo, axes_of_groups, axes_of_pairs
from ..common.shapes import array_bytes
from ..common.sharding_text import pspec_text
from ..models.propagation import PredictedCollective
from .graph import ShardingGraph, Step, Tensor, user_label
from .layout_change import layout_moves
from .windows import window_moves

FAMILIES = {
    "all-gather": "all-gather",
    "all-reduce": "all-reduce", "reduce-scatter": "all-reduce",
    "all-to-all": "reshard", "collective-permute": "reshard", "reshard": "reshard",
}


def per_device_bytes(t: Tensor, dims: list[Axes] | None = None) -> int:
    dims = t.dims if dims is None else dims
    local = [-(-n // size_of(axes)) for n, axes in zip(t.shape, dims)]
    return array_bytes(t.dtype, local)


def _factor_axes(step: Step, k: int, t: Tensor) -> dict[int, Axes]:
    rule = step.rule
    per: dict[int, Axes] = {}
    for d, factors in enumerate(rule.maps[k]):
        if factors and d < len(t.dims):
            for f, axes in zip(factors, split_for_factors(t.dims[d], [rule.factor_sizes[x] for x in factors])):
                per[f] = axes
    return per


def _labels(axes: Axes, sizes: dict[str, int]) -> list[str]:
    return [label(r, sizes) for r in axes]


def predict(g: ShardingGraph) -> list[PredictedCollective]:
    sizes = g.axis_sizes
    out: list[PredictedCollective] = []
    windowed: list[PredictedCollective] = []
    for step in g.steps:
        tensors = [g.tensors[t] for t in step.tensors]
        if step.is_edge:
            out.extend(_edge(step, tensors, sizes))
            continue
        proj = [_factor_axes(step, k, t) for k, t in enumerate(tensors)]
        results = range(step.n_operands, len(tensors))
        rule = step.rule
        targets = {f: next((proj[k][f] for k in results if f in proj[k]), None) for f in range(len(rule.factor_sizes))}
        first_result = tensors[results[0]] if len(results) else None
        # Axes an operand brings into the result on a factor they share (a gather's indices split on x,
        # their rows the result's): every device computes its own rows of the result on them.
        # (A scatter's updates are summed into the rows its indices name: partial sums are its nature.)
        split_rows = {a for k in range(step.n_operands) for f, axes in proj[k].items()
                      if f not in rule.reduction for a in axes if a in (targets.get(f) or ())} \
            if step.op in _ROWS_SPLIT_BY_OPERANDS else set()
        for k in range(step.n_operands):
            result = first_result if first_result is not None else tensors[k]
            out.extend(_operand(step, tensors[k], result, proj[k], targets, split_rows, sizes))
        if step.window is not None:
            windowed.extend(_windowed(step, tensors[0], sizes))
    out.extend(_explicit(g))
    # A window's two halos are alike but both compile: they are not deduplicated.
    return sorted(_dedupe(out) + windowed, key=lambda p: (-p.bytes, p.kind, p.value))


# Ops whose result rows an operand can split, so that a reduction over the same axis cannot be summed.
_ROWS_SPLIT_BY_OPERANDS = ("stablehlo.gather", "stablehlo.dot_general")


def _explicit(g: ShardingGraph) -> list[PredictedCollective]:
    """The collectives the program asks for inside shard_map: each device receives its
    results (as XLA counts a collective's bytes), over the axes its groups span."""
    mesh = MeshInfo(tuple((a, g.axis_sizes[a]) for a in g.mesh_axes), g.device_ids)
    out = []
    for c in g.explicit:
        if c.named_axes is not None:
            axes = list(c.named_axes)
        elif c.kind == "collective-permute":
            axes = axes_of_pairs([(a, b) for a, b in c.groups], mesh)
        else:
            axes = axes_of_groups([list(x) for x in c.groups], mesh) if c.groups else list(g.mesh_axes)
        results = [g.tensors[r] for r in c.results]
        out.append(PredictedCollective(
            kind=c.kind, bytes=sum(per_device_bytes(t) for t in results), mesh_axes=axes, op=c.op,
            value=results[0].name, reason=f"the program asks for it (jax.lax.{c.function} in a shard_map)"
            if c.function.isidentifier() else f"the program asks for it ({c.function} in a shard_map)",
            source=c.source, via=c.via, matched_compiled=None,
        ))
    return out


def _operand(step: Step, t: Tensor, result: Tensor, have_of: dict[int, Axes], targets: dict[int, Axes | None],
             split_rows: set[AxisRef], sizes: dict[str, int]) -> list[PredictedCollective]:
    """What operand ``t`` needs moved for the op to compute in its results' shardings."""
    rule, out = step.rule, []
    # An axis the operand holds on one of its dimensions that the result holds on another
    # of the operand's dimensions moves between them: one all-to-all of the local shard, not
    # a gather and a slice. (A factor the operand lacks, a dot's batch for its weight, takes
    # nothing from it.)
    gained = {a for f, have in have_of.items() for a in (targets.get(f) or ()) if a not in have}
    for f, have in sorted(have_of.items()):
        if not have:
            continue
        target = targets[f]
        # An axis on which an operand splits the result's rows cannot also sum partial results of this
        # factor (each device computes other rows: an interpolation's query points split on the axis its
        # gather reads along): the operand's dimension is gathered whole on it instead. (A weight gradient
        # whose result is split only by its reduce-scatter still sums partials.)
        taken = tuple(a for a in have if a in split_rows) if f in rule.reduction else ()
        if taken:
            out.append(_make("all-gather", per_device_bytes(t) * size_of(taken), taken, step, t,
                             f"the op reduces along {user_label(t)}'s dimension sharded on "
                             f"{', '.join(_labels(taken, sizes))}, an axis another operand splits "
                             f"{_split_dimension(result, taken)} on: the dimension is gathered whole", sizes))
            have = tuple(a for a in have if a not in taken)
            if not have:
                continue
        if f in rule.reduction:
            # The partial results summed are whole on the reduced axes: a result also split on one of them
            # (a weight gradient whose batch is contracted on fsdp, kept on fsdp) is summed whole and then
            # sliced (a reduce-scatter where XLA forms one).
            summed = [tuple(a for a in d if a not in have) for d in result.dims]
            out.append(_make("all-reduce", per_device_bytes(result, summed), have, step, result,
                             f"{user_label(t)} is sharded on {', '.join(_labels(have, sizes))} along a dimension "
                             f"the op reduces", sizes))
        elif f in rule.need_replication:
            out.append(_make("all-gather", per_device_bytes(t) * size_of(have), have, step, t,
                             f"the op needs {user_label(t)}'s dimension whole", sizes))
        elif target is not None and have != target:
            extra = tuple(a for a in have if a not in target)
            moved = tuple(a for a in extra if a in gained)
            if moved:
                out.append(_make("all-to-all", per_device_bytes(t), moved, step, t,
                                 f"{user_label(t)}'s {', '.join(_labels(moved, sizes))} moves to another "
                                 "dimension of the op's result", sizes))
                extra = tuple(a for a in extra if a not in moved)
            if extra and all(a in have for a in target):
                out.append(_make("all-gather", per_device_bytes(t) * size_of(extra), extra, step, t,
                                 f"{user_label(t)} is sharded on {', '.join(_labels(extra, sizes))} where the op's "
                                 f"result is not", sizes))
            elif extra:
                out.append(_make("all-to-all", per_device_bytes(t), tuple(dict.fromkeys(have + target)),
                                 step, t, f"{user_label(t)} is sharded on {', '.join(_labels(have, sizes))} where "
                                 f"the result uses {', '.join(_labels(target, sizes)) or 'none'}", sizes))
    return out


def _split_dimension(result: Tensor, taken: Axes) -> str:
    """The result's dimension that holds ``taken``, as a user names it: a matrix's rows or columns, else its
    index (a vmapped chain's logits f32[rows, chains] split on their chains: its columns, not its rows)."""
    held = [d for d, axes in enumerate(result.dims) if any(a in axes for a in taken)]
    if len(held) != 1:
        return "the result"
    if len(result.shape) == 2:
        return f"the result's {('rows', 'columns')[held[0]]}"
    return f"the result's dimension {held[0]} ({result.shape[held[0]]})"


def _windowed(step: Step, t: Tensor, sizes: dict[str, int]) -> list[PredictedCollective]:
    """A window read along a sharded dimension reaches into other devices' rows."""
    out = []
    moves = window_moves(t.shape, t.dims, step.window or (), per_device_bytes(t))
    for n, (kind, axes, nbytes, d) in enumerate(moves):
        below = n == 0 or moves[n - 1][3] != d
        what = ("the whole dimension, gathered" if kind == "all-gather" else
                f"rows from the neighbouring shard {'below' if below else 'above'}")
        out.append(_make(kind, nbytes, axes, step, t, f"a window of {step.window[d][0] if step.window else 0} along "
                         f"{user_label(t)}'s dimension {d}, sharded on {', '.join(_labels(axes, sizes))}, reads "
                         f"{what}", sizes))
    return out


def _edge(step: Step, tensors: list[Tensor], sizes: dict[str, int]) -> list[PredictedCollective]:
    if step.manual_axes is not None:
        # A shard_map boundary: the body's view lacks the manual axes by definition;
        # only free axes the two sides disagree on move data.
        outer, inner = tensors
        free = [tuple(r for r in d if r[0] not in step.manual_axes) for d in outer.dims]
        if free == list(inner.dims):
            return []
        return [_make("reshard", per_device_bytes(outer), tuple(dict.fromkeys(r for d in free for r in d)), step,
                      outer, f"shard_map's body and its boundary disagree on free axes: {user_label(outer)}", sizes)]
    dims = {tuple(t.dims) for t in tensors}
    if len(dims) <= 1:
        return []
    # The layout the members must share: a branch's or a loop's result (what XLA
    # reshards the yielded values to), otherwise the edge's second member (a
    # constraint's or reshard's result, out_shardings, a callee's argument).
    target = tensors[-1] if step.op == "stablehlo.while" else tensors[0] if step.op in _RESULT_FIRST else tensors[1]
    out: list[PredictedCollective] = []
    for t in tensors:
        if t is target or t.dims == target.dims:
            continue
        what = f"{user_label(t)} goes from {_spec(t, sizes)} to {_spec(target, sizes)}"
        for move in layout_moves(t.dtype, t.shape, t.dims, target.dims):
            out.append(_make(move.kind, move.bytes, move.axes, step, t,
                             f"{what}: {move.sentence(_labels(move.axes, sizes))}", sizes))
    return out


# Edges listed result first: a branch's result, then the value each region yields.
_RESULT_FIRST = ("stablehlo.case", "stablehlo.if")


def _spec(t: Tensor, sizes: dict[str, int]) -> str:
    return pspec_text([list(_labels(d, sizes)) for d in t.dims])


def _make(kind: str, nbytes: float, axes: Axes, step: Step, t: Tensor, reason: str, sizes: dict[str, int],
          ) -> PredictedCollective:
    return PredictedCollective(
        kind=kind, bytes=int(nbytes), mesh_axes=_labels(axes, sizes), op=step.op, value=t.name,
        reason=reason, source=step.source or t.source, via=step.via if step.source else t.via,
        matched_compiled=None,
    )


def _dedupe(items: list[PredictedCollective]) -> list[PredictedCollective]:
    seen, out = set(), []
    for p in items:
        key = (p.kind, p.value, p.op, tuple(p.mesh_axes))
        if key not in seen:
            seen.add(key)
            out.append(p)
    out.sort(key=lambda p: (-p.bytes, p.kind, p.value))
    return out
