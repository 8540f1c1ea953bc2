"""Collectives the program asks for by name: ``jax.lax.psum``, ``all_gather``,
``psum_scatter``, ``all_to_all`` and ``ppermute`` inside a ``shard_map`` lower to
StableHLO collectives with their device groups already chosen. Propagation has
nothing to decide about them (Shardy gives them no sharding rule), but they are
communication the step pays: ``propagate`` lists each one with the mesh axes its
groups span and the bytes each device receives, and matches it against XLA's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jaxlib.mlir import ir

from ..models.report import SourceLocation

# StableHLO op -> (the compiled collective's kind, the jax.lax function that asks for it).
KINDS = {
    "stablehlo.all_reduce": ("all-reduce", "psum"),
    "stablehlo.all_gather": ("all-gather", "all_gather"),
    "stablehlo.reduce_scatter": ("reduce-scatter", "psum_scatter"),
    "stablehlo.all_to_all": ("all-to-all", "all_to_all"),
    "stablehlo.collective_permute": ("collective-permute", "ppermute"),
    "stablehlo.collective_broadcast": ("collective-broadcast", "collective broadcast"),
}


@dataclass(frozen=True)
class ExplicitCollective:
    kind: str
    op: str
    function: str  # what the user called (psum, ppermute, ...)
    results: tuple[int, ...]  # tensor ids of its results (an all_reduce of several values has several)
    # Device groups; for a permute, its (source, target) pairs.
    groups: tuple[tuple[int, ...], ...]
    source: SourceLocation | None
    via: SourceLocation | None
    # The mesh axes the groups span, where StableHLO names them (JAX 0.12's
    # ``#stablehlo.replica_group_mesh_axes``) instead of listing device ids.
    named_axes: tuple[str, ...] | None = None


_AXIS_REF = re.compile(r'axis_ref<name = "([^"]+)"([^>]*)>')
_SUB_AXIS = re.compile(r"pre_size = (\d+), size = (\d+)")


def _named_axes(attr: ir.Attribute) -> tuple[str, ...] | None:
    """``#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [#stablehlo.axis_ref<name = "x">]>``:
    the axes' names (a sub-axis as Shardy writes it, ``x:(1)2``)."""
    text = str(attr)
    if "replica_group_mesh_axes" not in text:
        return None
    out = []
    for name, rest in _AXIS_REF.findall(text):
        sub = _SUB_AXIS.search(rest)
        out.append(f"{name}:({sub.group(1)}){sub.group(2)}" if sub else name)
    return tuple(out)


def _dense(op: ir.OpView, name: str) -> tuple[tuple[int, ...], ...]:
    if name not in op.attributes:
        return ()
    try:
        attr = ir.DenseIntElementsAttr(op.attributes[name])
    except ValueError:  # named mesh axes (JAX 0.12), not device ids
        return ()
    shape = ir.RankedTensorType(attr.type).shape
    values = [int(attr[i]) for i in range(len(attr))]
    width = shape[-1] if shape and shape[-1] else 1
    return tuple(tuple(values[i:i + width]) for i in range(0, len(values), width))


def read_explicit(op: ir.OpView, results: list[int | None], source: SourceLocation | None,
                  via: SourceLocation | None) -> ExplicitCollective | None:
    kind, function = KINDS[op.name]
    attribute = "source_target_pairs" if op.name == "stablehlo.collective_permute" else "replica_groups"
    groups = _dense(op, attribute)
    named = _named_axes(op.attributes[attribute]) if attribute in op.attributes else None
    kept = tuple(r for r in results if r is not None)
    if not kept:
        return None
    return ExplicitCollective(kind, op.name, function, kept, groups, source, via, named)
