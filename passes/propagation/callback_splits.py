"""The argument whose split reaches a host callback's reader: where XLA rebuilds a value one device holds (a
host callback's operand or result: ``jax.pure_callback``, equinox's ``error_if`` in every diffrax solve) for a
reader that propagation splits, that split is some argument's, carried there by propagation (newbie16 F4: a
diffrax step whose observations ``ys_obs`` have their time axis on ``model`` makes equinox's ``error_if``
result ``f32[32, 64]`` be read as ``P('model')``; with the state's features on ``model`` instead, ``y0``'s
split reaches it as ``P(None, 'model')``).

The argument is one holding the split's axes on a dimension of the value's split dimension's size: the
nearest of the arguments the callback is computed from (the solve's state ``y0``, not the observations the
solution is compared with later), else the only such argument (``ys_obs``, the one whose time axis is 32
long and on ``model``). None where no argument, or more than one unrelated to the callback, holds it, and
where a stated layout (a with_sharding_constraint) reads the callback's result: the program asks for it.
"""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir

from ..hlo.involuntary_remat import LocatedRemat
from ..models.report import TensorInfo
from ..source.frames import DEFAULT_OWNERSHIP
from ..stablehlo.module import op_name_of_location
from .shardy_reference import walk_ops
from .split_activations import Walk

_STATED = frozenset({"sdy.sharding_constraint", "sdy.reshard"})
# Values followed from a callback's result to see whether a stated layout reads it.
_MAX_READERS = 64


def _stated_reader(results: list[ir.Value[Any]]) -> bool:
    """Whether a with_sharding_constraint (or reshard) reads a callback's result, through ops that keep its
    shape: then the reader's layout is the program's own, not an argument's."""
    todo, seen = list(results), 0
    while todo and seen < _MAX_READERS:
        value = todo.pop()
        seen += 1
        for use in value.uses:
            user = use.owner
            if user.operation.name in _STATED:
                return True
            todo += [r for r in user.results if r.type == value.type]
    return False


def _callbacks(walk: Walk, op_name: str | None) -> list[Any]:
    """The host callbacks at ``op_name`` (the compiled metadata's, which ends with the callback's op_name inside
    its function), or every host callback where none is named so (JAX 0.12 writes a callback's location as
    ``pure_callback:`` around its name stack)."""
    every = [op for fn in walk.funcs.values() for op in walk_ops(fn.regions[0].blocks[0])
             if op.operation.name == "stablehlo.custom_call" and "call_target_name" in op.attributes
             and "callback" in ir.StringAttr(op.attributes["call_target_name"]).value]
    named = [op for op in every if op_name and (own := op_name_of_location(op.location))
             and (op_name == own or op_name.endswith("/" + own))]
    return named or every


def _callback_arguments(walk: Walk, op_name: str | None) -> list[int] | None:
    """The entry arguments the host callbacks at ``op_name`` are computed from, nearest first; None where a
    stated layout reads one's result."""
    found: list[int] = []
    for op in _callbacks(walk, op_name):
        if _stated_reader(list(op.results)):
            return None
        for operand in op.operands:
            found += [k for k in walk.arguments_of(operand) if k not in found]
    return found


def _holding(inputs: tuple[TensorInfo, ...], size: int, axes: set[str]) -> list[tuple[int, int]]:
    return [(t.index, d) for t in inputs for d, (n, on) in enumerate(zip(t.shape, t.sharding or []))
            if n == size and axes <= {a.split(":")[0] for a in on}]


def with_split_arguments(located: tuple[LocatedRemat, ...], module: ir.Module, inputs: tuple[TensorInfo, ...],
                         ownership: Any = DEFAULT_OWNERSHIP) -> tuple[LocatedRemat, ...]:
    """The rematerializations, each whose one side is one device's with the argument its other side's split
    comes from (``LocatedRemat.argument``), where one is found."""
    if not any(r.remat.source_device is not None or r.remat.target_device is not None for r in located):
        return located
    walk = Walk(module, ownership)
    out = []
    for r in located:
        remat = r.remat
        split = remat.target_sharding if remat.source_device is not None else remat.source_sharding
        if (remat.source_device is None and remat.target_device is None) or not split:
            out.append(r)
            continue
        ancestors = _callback_arguments(walk, remat.op_name)
        chosen = None
        for d, axes in enumerate(split if ancestors is not None else ()):
            if not axes or d >= len(remat.global_shape):
                continue
            held = _holding(inputs, remat.global_shape[d], {a.split(":")[0] for a in axes})
            near = sorted((h for h in held if h[0] in ancestors), key=lambda h: ancestors.index(h[0]))  # type: ignore
            chosen = near[0] if near else held[0] if len(held) == 1 else None
            if chosen is not None:
                break
        out.append(r if chosen is None else LocatedRemat(r.remat, r.source, r.via, r.collective, chosen))
    return tuple(out)
