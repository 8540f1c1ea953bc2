"""The graph sharding propagation runs on: tensors (the SSA values), steps (an op
with its factor rule, or a data-flow edge tying tensors that must agree) and the
seeds the program states. ``sharding_graph.build_graph`` builds it from a module;
the propagation, its predictions and suggest's solver read and extend it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common.axes import Axes, AxisRef
from ..common.device_groups import MeshInfo
from ..models.report import SourceLocation
from .explicit_collectives import ExplicitCollective


@dataclass(frozen=True)
class FactorRule:
    factor_sizes: tuple[int, ...]
    # Per tensor (operands then results), per dimension, the factors it maps to.
    maps: tuple[tuple[tuple[int, ...], ...], ...]
    reduction: frozenset[int] = frozenset()
    need_replication: frozenset[int] = frozenset()
    blocked: frozenset[int] = frozenset()

    @property
    def pass_through(self) -> bool:
        """Elementwise-like: every tensor maps every factor to the same dimension."""
        return not self.reduction and len(set(self.maps)) == 1


@dataclass
class Tensor:
    id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    source: SourceLocation | None
    op_name: str | None
    dims: list[Axes]
    closed: list[bool]
    priority: list[int | None]
    replicated: frozenset[AxisRef] = frozenset()
    seed: str | None = None  # what stated this tensor's sharding, for provenance
    # Where that was stated, where it is not the value's own line: a constraint that seeds its operand is at
    # the constraint's line (haliax's hax.shard), not at the line that computed the operand.
    seed_source: SourceLocation | None = None
    seed_via: SourceLocation | None = None
    virtual: bool = False  # a seed holder with no SSA value (a result attribute, a boundary)
    compare: bool = True  # counted in agreement (constants and virtual holders are not)
    parent: list[tuple[int, int] | None] = field(default_factory=list)  # per dim: (tensor, step) it came from
    via: SourceLocation | None = None  # the library line the op went through
    mesh: MeshInfo | None = None  # the mesh its sharding is on (None: not stated, nor propagated yet)
    # Inside a shard_map body: the mesh axes that are manual there (its shape is the
    # local one; only the other axes can shard it further).
    manual_axes: frozenset[str] = frozenset()


def user_label(t: Tensor) -> str:
    """What a user calls a value: the pytree path of the argument it is (``argument
    params['w']``), else its type (``f32[64,1024]``). SSA names (``%iterArg_35``,
    ``@closed_call:%25``) are the IR's, not the user's; reports keep them in ``value``."""
    if t.seed and t.seed.startswith("argument ") and not t.seed.startswith(("argument %", "argument @")):
        return t.seed
    return f"{t.dtype}[{','.join(map(str, t.shape))}]"


@dataclass(frozen=True)
class Step:
    id: int
    op: str
    tensors: tuple[int, ...]
    n_operands: int
    rule: FactorRule
    source: SourceLocation | None
    is_edge: bool = False
    via: SourceLocation | None = None
    # A shard_map boundary (tensors: the global view, the body's view): the body's
    # sharding is the global one less these manual axes.
    manual_axes: frozenset[str] | None = None
    # An sdy.propagation_barrier's allowed direction ("forward", "backward", "none",
    # "both"), in place of the op-priority schedule.
    allowed_direction: str | None = None
    # An operand (not a scalar, not a constant expression, which Shardy splits per
    # use) has several uses: the op-priority schedule defers such ops.
    multi_use: bool = False
    window: tuple[tuple[int, int], ...] | None = None  # a reduce_window's (size, low padding) per dimension


@dataclass
class ShardingGraph:
    axis_sizes: dict[str, int]
    mesh_axes: tuple[str, ...]
    tensors: list[Tensor] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    value_ids: dict[Any, int] = field(default_factory=dict)  # ir.Value -> tensor id
    without_rule: list[str] = field(default_factory=list)  # ops that stop propagation
    explicit: list[ExplicitCollective] = field(default_factory=list)  # psum, ppermute... inside shard_map
    device_ids: tuple[int, ...] | None = None  # the mesh's logical device at each position (None: iota)
    # Function boundaries, where Shardy's export makes shardings divide the shape:
    # every function's arguments (tensor, function name) and every call's results.
    function_args: list[tuple[int, str]] = field(default_factory=list)
    call_results: list[int] = field(default_factory=list)
    entry: str | None = None  # the function Shardy's export treats as main
    _names: dict[str, Tensor] | None = field(default=None, repr=False)
    _names_built_at: int = field(default=-1, repr=False)

    def tensors_by_name(self) -> dict[str, Tensor]:
        # Rebuilt only when tensors were added since (names may repeat, so the
        # dict's size is no measure of that).
        if self._names is None or self._names_built_at != len(self.tensors):
            self._names = {t.name: t for t in self.tensors if not t.virtual}
            self._names_built_at = len(self.tensors)
        return self._names
