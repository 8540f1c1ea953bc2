"""``suggest``'s single-move baseline: the written layout with one mesh axis moved.

A move takes one free mesh axis off where an argument has it and puts it on another
of that argument's dimensions (or nowhere: replicated over it); moved *between
arguments*, the axis also leaves every other argument it was on. An argument that
carries none of the free axes also gets all of them on each one dimension (the layout
that spreads it over the most devices, which lint's SL203 fix compiles for a replicated
argument), and a dimension's group of two free axes or more also moves whole to another
dimension or off (the move lint's SL206 fix compiles for an unevenly split dimension), so suggest
compiles the fix lint would print. This is the local search a person does by hand (the
value array sharded on the wealth axis its interpolation reads, moved to its preference-type
axis), and ``suggest`` compiles the moves and keeps the best as one of its versions, so
what it suggests is never worse than the best single move it tried.

Each move is a single move as lint's fix checks compile one (backend/parameter_moves.py): the
argument with the optimizer state that mirrors it, and the state that comes back returned in the
new layout, so a move suggest prints and the same fix lint prints are the same program, measured
the same.

Moves are taken on the largest arguments first (a move on a scalar changes
nothing worth a compile) and at most ``MAX_MOVES`` are compiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from ....passes.common.data_parallel import data_parallel_layout
from ....passes.common.shapes import array_bytes
from ..parameter_moves import mirrors, single_move

MAX_MOVES = 8
LARGEST_ARGUMENTS = 4
NAME = "single move"

Pins = dict[int, list[list[str]]]


@dataclass(frozen=True)
class Move:
    description: str
    pins: Pins  # every argument's sharding, per dimension its mesh axes
    moved: Pins  # the arguments the move changes (the text compiled pins these, as lint's fix check does)
    results: Pins  # the moved state's results, returned in its new layout


def _spec(sharding: list[list[str]]) -> str:
    parts = [("None" if not axes else repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))) for axes in sharding]
    while parts and parts[-1] == "None":
        parts.pop()
    return f"P({', '.join(parts)})"


def _without(sharding: list[list[str]], axis: str) -> list[list[str]]:
    return [[a for a in axes if a != axis] for axes in sharding]


def _divides(shape: Sequence[int], sharding: list[list[str]], sizes: dict[str, int]) -> bool:
    return all(n % prod(sizes.get(a, 1) for a in axes) == 0 for n, axes in zip(shape, sharding))


def single_moves(inputs, written: Pins, free_axes: Sequence[str], sizes: dict[str, int],
                 fixed_paths: set[str], returned: dict[int, int] | None = None) -> list[Move]:
    """The moves of one free axis from the written layout, on the largest arguments first (an
    argument's optimizer state moving with it); each a complete set of argument shardings (fixed
    arguments as written) and the results of the moved state (``returned``: result -> argument)."""
    base = {x.index: [list(a) for a in (written.get(x.index) or [[] for _ in x.shape])] for x in inputs}
    movable = [x for x in inputs if x.path not in fixed_paths and x.shape]
    held = frozenset(x.index for x in inputs if x.path in fixed_paths)
    largest: list = []
    for x in sorted(movable, key=lambda x: (-array_bytes(x.dtype, list(x.shape)), x.index)):
        # An argument's optimizer state moves with it: one of them stands for all.
        if len(largest) < LARGEST_ARGUMENTS and not any(x.index in mirrors(inputs, y.index) for y in largest):
            largest.append(x)
    seen = {_key(base)}
    moves: list[Move] = []

    def add(description: str, edits: Pins) -> None:
        moved, results = single_move(inputs, returned or {}, edits, held)
        pins = {**base, **moved}
        k = _key(pins)
        if k not in seen and all(_divides(x.shape, pins[x.index], sizes) for x in inputs):
            seen.add(k)
            moves.append(Move(description, pins, moved, results))

    for x in largest:
        for axis in free_axes:
            for dim in [None, *range(len(x.shape))]:
                own = _without(base[x.index], axis)
                if dim is not None:
                    own[dim] = own[dim] + [axis]
                    own[dim].sort(key=list(sizes).index)  # in mesh order, as a PartitionSpec tuple is read
                change = f"{x.path}: {_spec(base[x.index])} -> {_spec(own)}"
                add(change, {x.index: own})
                with_x = {x.index, *mirrors(inputs, x.index)}
                others = [y for y in movable if y.index not in with_x and any(axis in a for a in base[y.index])]
                if dim is not None and others:
                    across = {x.index: own, **{y.index: _without(base[y.index], axis) for y in others}}
                    off = f"{axis!r} off {', '.join(y.path for y in others)}"
                    add(f"{change}, {off}" if own != base[x.index] else f"{off} (kept on {x.path})", across)
        # A dimension written with two free axes or more: the group moved whole to another dimension it
        # divides, or dropped (lint's SL206 fix moves P(('data', 'model')) to P(None, ('data', 'model'))),
        # which moving one axis at a time never reaches.
        for dim, axes in enumerate(base[x.index]):
            group = [a for a in axes if a in free_axes]
            if len(group) < 2:
                continue
            for to in [None, *(d for d in range(len(x.shape)) if d != dim)]:
                own = [[a for a in on if a not in group] for on in base[x.index]]
                if to is not None:
                    own[to] = [*own[to], *group]  # the group as written: its order is the devices' order
                add(f"{x.path}: {_spec(base[x.index])} -> {_spec(own)}", {x.index: own})
        # An argument replicated over two free axes or more: all of them on one dimension, the layout
        # that spreads it over the most devices, as lint's SL203 fix tries it on each dimension.
        if len(free_axes) > 1 and not any(axis in axes for axes in base[x.index] for axis in free_axes):
            for dim in range(len(x.shape)):
                own = [list(axes) for axes in base[x.index]]
                own[dim] = sorted([*own[dim], *free_axes], key=list(sizes).index)
                add(f"{x.path}: {_spec(base[x.index])} -> {_spec(own)}", {x.index: own})
    return moves[:MAX_MOVES]


def batch_move(inputs, written: Pins, free_axes: Sequence[str], sizes: dict[str, int], fixed_paths: set[str],
               returned: dict[int, int] | None = None) -> Move | None:
    """The move lint's idle-batch fix compiles (SL105's and SL207's, analyzer/backend/idle_batch_fixes.py): where a
    free mesh axis splits no argument and the batch (the arguments that are not state, split on dimension 0 alone)
    leaves it idle, every batch argument given the data-parallel layout (dimension 0 over every free axis, moved
    together); None where there is no such batch. suggest compiles it beside its single moves, and lint's fix
    stage compiles those moves beside it, so the two choose among the same layouts for the batch by one rule."""
    used = {a for s in written.values() for axes in (s or []) for a in axes}
    if not any(a not in used for a in free_axes):
        return None
    state = set((returned or {}).values())
    batch = [x for x in inputs if x.index not in state and x.path not in fixed_paths and x.shape
             and any(written.get(x.index) or [])]
    if not batch or any(any(axes for axes in (written.get(x.index) or [])[1:]) for x in batch):
        return None
    layouts = {x.index: data_parallel_layout(x.shape, free_axes, sizes) for x in batch}
    if any(layout is None for layout in layouts.values()):
        return None
    base = {x.index: [list(a) for a in (written.get(x.index) or [[] for _ in x.shape])] for x in inputs}
    moved = {i: layout for i, layout in layouts.items() if layout is not None and layout != base[i]}
    if not moved:
        return None
    spec = _spec(next(iter(moved.values())))
    olds = sorted({_spec(base[i]) for i in moved})
    description = f"{', '.join(x.path for x in batch if x.index in moved)}: {', '.join(olds)} -> {spec}"
    return Move(description, {**base, **moved}, moved, {})


def _key(pins: Pins) -> tuple:
    return tuple(sorted((i, tuple(tuple(a) for a in s)) for i, s in pins.items()))


def best_move(moves: list[Move], compiled: list, resolution_s: float = 0.0, written: frozenset[str] = frozenset(),
              reference=None) -> tuple[Move, object, object] | None:
    """(the move, its Version renamed ``single move``, its report) of the best compiled move, by
    ``advised_version``'s measure (``written``: the program's own rematerializations; ``reference``: the written
    shardings' Version, which the moves measured better than are ranked against); None when none compiled."""
    from .verdict import advised_version, with_rematerializations

    by_name = {}
    for k, (move, (version, report)) in enumerate(zip(moves, compiled)):
        renamed = with_rematerializations(version.model_copy(update={"name": f"move {k}"}), report, written)
        by_name[f"move {k}"] = (move, renamed, report)
    best = advised_version([v for _, v, _ in by_name.values()], resolution_s, reference)
    if best is None:
        return None
    move, version, report = by_name[best.name]
    return move, version.model_copy(update={"name": NAME, "description": move.description}), report
