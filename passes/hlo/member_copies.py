"""Which buffers live at the memory peak are a parameter copied once per member of a vmapped batch.

Vmapping a function that closes over the model (an ensemble's ODE solve, per-example losses) makes
reverse mode carry one cotangent of every closed-over parameter per member: a buffer whose shape is a
parameter's per-device shape with the batch dimension added. XLA's op name says only that it came from
``transpose(jvp(vmap(...)))``; the arguments' per-device shapes say what it is.

A match asks for the same element type, an op name in the backward pass of a ``vmap``, a parameter of two or more
dimensions (a vector's copies look like any activation of the batch: ``[members, 512]``) and every
other dimension equal, and the batch size the most bytes agree on. Where several parameters match (with the
batch at another place, or of one shape), the buffer names them all; where more than ``MOST_NAMED`` would,
none.

The shape alone is no evidence: a pairwise tensor is one too (jax_md's ``vmap(vmap(displacement))(R, R)``'s
cotangent f32[4096,512,3] is 4096 x R's per-device [512,3]). A per-member gradient ends as the parameter's:
XLA sums it over the members (after the loop that carries it, if one does) and over nothing else. So the
compiled program must show that: a use that sums the members away to the parameter's shape, and no use that
sums another dimension (the pair's other side) or reshapes it (a neighbour list's scatter).
"""

from __future__ import annotations

import re
from math import prod

from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes, parse_arrays
from ..models.per_member_copy import PerMemberCopy
from ..models.report import LiveBuffer, MemorySummary, TensorInfo
from .module import HloInstruction, HloModule

_SUB_AXIS = re.compile(r".+:\((\d+)\)(\d+)")  # Shardy's "data:(2)2": a sub-axis of size 2
# More parameters of one shape than this (a stack of identical layers given one by one) name none of them.
MOST_NAMED = 4


def per_device_shape(t: TensorInfo, mesh: MeshInfo) -> tuple[int, ...]:
    """The argument's shape on one device: each dimension divided (rounded up, as XLA pads) by its axes' sizes."""
    sizes = dict(mesh.axes)
    dims = list(t.sharding or []) + [[]] * (len(t.shape) - len(t.sharding or []))
    return tuple(-(-n // prod(int(m.group(2)) if (m := _SUB_AXIS.fullmatch(a)) else sizes.get(a, 1) for a in axes))
                 for n, axes in zip(t.shape, dims))


def mark_member_copies(memory: MemorySummary | None, params: tuple[TensorInfo, ...],
                       mesh: MeshInfo, hlo: HloModule | None) -> MemorySummary | None:
    """The memory summary with each live buffer that is a per-member copy of parameters said so.

    One vmap's batch has one size: of the sizes the buffers' shapes allow, the one that accounts for the most
    bytes is the batch, and a buffer matched only with another size is not said (the saved trajectory
    ``[256 members, 32 times, 64]`` is also 32 x a [256,64] weight's shape)."""
    if memory is None or not mesh.axes or not memory.live_at_peak:
        return memory
    by_shape: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for t in params:
        if len(t.shape) >= 2:
            by_shape.setdefault((t.dtype, per_device_shape(t, mesh)), []).append(t.path)
    matches = [_matches(b, by_shape) if hlo and _summed_over_members(b, _matches(b, by_shape), hlo) else []
               for b in memory.live_at_peak]
    weight: dict[int, int] = {}
    for b, found in zip(memory.live_at_peak, matches):
        for members in {shape_members for shape_members, _, _ in found}:
            weight[members] = weight.get(members, 0) + b.bytes
    ranked = sorted(weight.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):  # no batch, or two alike: not said
        return memory
    batch = ranked[0][0]
    order = {t.path: k for k, t in enumerate(params)}
    live = []
    for b, found in zip(memory.live_at_peak, matches):
        at = [(dim, paths) for members, dim, paths in found if members == batch]
        copy = PerMemberCopy(members=batch, dims=[dim for dim, _ in at],
                             parameters=sorted({p for _, ps in at for p in ps}, key=order.__getitem__)) if at else None
        live.append(b.model_copy(update={"per_member_copy": copy}) if copy and len(copy.named()) <= MOST_NAMED else b)
    return memory.model_copy(update={"live_at_peak": live})


def _matches(b: LiveBuffer, by_shape: dict[tuple[str, tuple[int, ...]], list[str]]) -> list[tuple[int, int, list[str]]]:
    """(members, dimension, parameters) for each dimension whose removal leaves parameters' per-device shape:
    a [64,128,64] buffer is 64 x a [128,64] parameter or a [64,128] one x 64; [256,256,64] is 256 x a [256,64]
    one with the batch first or second."""
    op = b.op_name or ""
    # The backward pass of a vmapped function: a forward value under vmap that happens to have a parameter's
    # shape and one dim more (a value function's [32 states, 16384 grid, 32 choices] and its [32,16384] V) is none.
    if b.shape is None or b.dtype is None or len(b.shape) < 3 or "vmap(" not in op or "transpose(" not in op:
        return []
    if b.bytes != array_bytes(b.dtype, b.shape):  # a slice of a larger value, or a shape the report misread
        return []
    shape = tuple(b.shape)
    if (b.dtype, shape) in by_shape:  # a parameter's own shape: its gradient or update, not a copy per member
        return []
    return [(shape[dim], dim, paths) for dim in range(len(shape)) if shape[dim] >= 2
            and (paths := by_shape.get((b.dtype, shape[:dim] + shape[dim + 1:])))]


# Values looked at, past which the buffer is not said (a loop nest's carry does not branch that far).
_MOST_USES = 64


def _summed_over_members(b: LiveBuffer, found: list[tuple[int, int, list[str]]], hlo: HloModule) -> bool:
    """Whether XLA's uses of the buffer sum its members away and nothing else: one use's result is its
    shape without a members dimension, none is its shape without another (a pairwise tensor's other side)
    or another shape (a reshape to scatter by a neighbour list). The value is followed through copies, ops
    of its own shape (adding to the accumulated gradient) and a loop's carry to the loop's result."""
    ins = hlo.instruction(b.name.split("{")[0])
    if ins is None or not found or b.shape is None:
        return False
    shape = tuple(b.shape)
    summed = {shape[:d] + shape[d + 1:] for _, d, _ in found}
    users, summed_once = hlo.users(), False
    todo, seen = [ins], set[str]()
    while todo:
        cur = todo.pop()
        if cur.name in seen:
            continue
        seen.add(cur.name)
        if len(seen) > _MOST_USES:
            return False
        for user in users.get(cur.name, []):
            if user.opcode == "tuple":
                todo.extend(_loop_results(user, [k for k, op in enumerate(user.operands) if op == cur.name], hlo))
                continue
            dims = [a.dims for a in parse_arrays(user.shape)]
            if any(d in summed for d in dims):
                summed_once = True
            elif dims and all(d == shape for d in dims):
                todo.append(user)
            else:
                return False
    return summed_once


def _loop_results(carry: HloInstruction, indices: list[int], hlo: HloModule) -> list[HloInstruction]:
    """Where the elements ``indices`` of a tuple a loop starts from, or its body's carried tuple, come out of
    the loop: the while's get-tuple-elements of those indices (a tuple no loop carries: none)."""
    loops = [w for w in hlo.users().get(carry.name, []) if w.opcode == "while"]
    if carry.is_root:
        body = hlo.computation_of(carry.name) or ""
        loops += [w for w in hlo.callers().get(body, []) if w.opcode == "while" and ("body", body) in w.called()]
    return [g for w in loops for g in hlo.users().get(w.name, [])
            if g.opcode == "get-tuple-element" and g.attrs.get("index", "").isdigit()
            and int(g.attrs["index"]) in indices]
