"""Layout changes the program states on both sides: a value a ``with_sharding_constraint`` lays out, re-laid
out by reshapes and transposes alone, and constrained again. vmoe's and flaxformer's Mixture-of-Experts
dispatch and combine are written this way (``_dispatch``: constrain the groups, swap the expert dimension
to the front, constrain again): the all-to-all XLA runs between the two constraints is the MoE's exchange
of tokens between the devices of their groups and of their experts, asked for as plainly as a
``shard_map``'s ``all_to_all`` (whose intent is ``explicit``), and no layout of any argument removes it.

Such a collective's intent is ``constraint``: intended traffic, counted and shown, never a reshard that
SL101, SL102 or SL105 warn on. It is matched by its line (and library line), the line of an op between
the two constraints or of the second constraint, and by its mesh axes, which the constraints must name;
the compiled program keeps no trace of the constraints themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..models.report import Collective, SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .module import attribution_of_location, sharding_axes
from .sharding_constraints import CONSTRAINT_OP, constraint_ops

# Ops that only re-lay out a value's elements: a move between two constraints through them is the program's.
_LAYOUT_OPS = frozenset({"stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert"})
# Collectives that move a value's elements between devices without reducing or replicating them.
_MOVES = frozenset({"all-to-all", "collective-permute"})
# The longest run of layout ops looked through between two constraints.
_MAX_HOPS = 8
INTENT = "constraint"


@dataclass(frozen=True)
class StatedMove:
    """The lines of one stated layout change (user line, library line) and the mesh axes its constraints name."""

    lines: frozenset[tuple[tuple[str, int] | None, tuple[str, int] | None]]
    axes: frozenset[str]


def _where(loc: SourceLocation | None) -> tuple[str, int] | None:
    return (loc.file, loc.line) if loc is not None else None


def _line(op: ir.Operation, ownership: CodeOwnership) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    source, via = attribution_of_location(op.location, ownership)
    return _where(source), _where(via)


def _axes(op: ir.Operation) -> frozenset[str]:
    sharding = sharding_axes(sdy.TensorShardingAttr(op.attributes["sharding"]))
    return frozenset(label.split(":")[0] for dim in sharding for label in dim)


def _producer(value: ir.Value[Any]) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def stated_moves(module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> tuple[StatedMove, ...]:
    """Each constraint whose operand comes, through layout ops only (one at least), from another constraint."""
    out = []
    for second in constraint_ops(module):
        between: list[ir.Operation] = []
        producer = _producer(second.operands[0])
        while producer is not None and producer.name in _LAYOUT_OPS and len(between) < _MAX_HOPS:
            between.append(producer)
            producer = _producer(producer.operands[0])
        if not between or producer is None or producer.name != CONSTRAINT_OP:
            continue
        axes = _axes(producer) | _axes(second)
        if axes:
            out.append(StatedMove(frozenset(_line(op, ownership) for op in [*between, second]), axes))
    return tuple(out)


def _axis_names(labels: list[str]) -> frozenset[str]:
    if not labels or labels[0].startswith("<"):  # <N devices>: no axis of the mesh
        return frozenset()
    return frozenset(label.split(":")[0] for label in labels)


Attribution = tuple[SourceLocation | None, SourceLocation | None]


def mark_stated_moves(collectives: tuple[Collective, ...], moves: tuple[StatedMove, ...],
                      own_lines: dict[str, Attribution]) -> tuple[Collective, ...]:
    """The collectives with the resharding moves the program states on both sides as ``constraint``.
    ``own_lines``: each collective's own line in the compiled program's metadata (user's, library's), which
    the line it is shown at may not be (JAX 0.12's CPU all-to-all is shown at the op that reads it)."""
    if not moves:
        return collectives

    def stated(c: Collective) -> bool:
        names = _axis_names(c.mesh_axes)
        own = own_lines.get(c.hlo_name, (None, None))
        lines = {(_where(c.source), _where(c.via)), (_where(own[0]), _where(own[1]))} - {(None, None)}
        return bool(names) and any(lines & m.lines and names <= m.axes for m in moves)

    return tuple(c.model_copy(update={"intent": INTENT})
                 if c.intent == "reshard" and c.kind in _MOVES and stated(c) else c for c in collectives)
