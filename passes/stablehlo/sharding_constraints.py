"""The user's ``with_sharding_constraint`` (and ``jax.device_put`` inside jit) as the StableHLO states them:
each ``sdy.sharding_constraint`` op's value (shape, dtype), its mesh axes per dimension and the user's line.
Numbered in the module's walk order, the order ``analyzer/backend/sharding_edits.py`` edits them in."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes, mlir_dtype_to_hlo
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .module import axis_label_size, sharding_axes, source_of_location

CONSTRAINT_OP = "sdy.sharding_constraint"


@dataclass(frozen=True)
class StatedConstraint:
    ordinal: int  # among the module's sharding constraints, in walk order
    shape: tuple[int, ...]
    element_type: str  # MLIR spelling (f32, bf16)
    sharding: list[list[str]]
    source: SourceLocation | None

    def ways(self, mesh: MeshInfo) -> list[int]:
        """How many shards each dimension is cut into."""
        return [prod(axis_label_size(a, mesh) for a in axes) for axes in self.sharding]

    def uneven_dims(self, mesh: MeshInfo) -> list[int]:
        """The dimensions whose size the product of their axes does not divide."""
        return [d for d, (n, k) in enumerate(zip(self.shape, self.ways(mesh))) if k > 1 and n % k]


def constraint_ops(module: ir.Module) -> Iterator[ir.Operation]:
    """Every ``sdy.sharding_constraint`` in the module, in walk order (functions, then nested regions)."""
    def walk(op: ir.Operation) -> Iterator[ir.Operation]:
        for region in op.regions:
            for block in region.blocks:
                for view in block.operations:
                    inner = view.operation
                    if inner.name == CONSTRAINT_OP:
                        yield inner
                    yield from walk(inner)

    yield from walk(module.operation)


def read_constraints(module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> tuple[StatedConstraint, ...]:
    out = []
    for k, op in enumerate(constraint_ops(module)):
        ty = op.results[0].type
        if not isinstance(ty, ir.RankedTensorType):
            continue
        rt = ir.RankedTensorType(ty)
        sharding = sharding_axes(sdy.TensorShardingAttr(op.attributes["sharding"]))
        out.append(StatedConstraint(k, tuple(int(d) for d in rt.shape), str(rt.element_type), sharding,
                                    source_of_location(op.location, ownership)))
    return tuple(out)


def even_alternatives(shape: tuple[int, ...], sharding: list[list[str]], mesh: MeshInfo) -> list[list[list[str]]]:
    """Specs whose every dimension divides, nearest the stated one first: the uneven dimension's axes moved
    to the last other dimension they divide (the value stays as sharded), then only the leading axes that
    divide it kept on it (less sharded, nothing padded)."""
    sizes = [prod(axis_label_size(a, mesh) for a in axes) for axes in sharding]
    uneven = [d for d, (n, k) in enumerate(zip(shape, sizes)) if k > 1 and n % k]
    out: list[list[list[str]]] = []
    moved = [list(axes) for axes in sharding]
    for d in uneven:
        moved[d] = []
        k = sizes[d]
        fits = [e for e in range(len(shape)) if e not in uneven and shape[e] % (sizes[e] * k) == 0]
        if not fits:
            moved = []
            break
        moved[fits[-1]] = moved[fits[-1]] + list(sharding[d])
        sizes[fits[-1]] *= k
    if moved:
        out.append(moved)
    fewer = [list(axes) for axes in sharding]
    for d in uneven:
        keep = list(sharding[d])
        while keep and shape[d] % prod(axis_label_size(a, mesh) for a in keep):
            keep.pop()
        fewer[d] = keep
    if fewer not in out and fewer != sharding:
        out.append(fewer)
    return out


def axes_off(shape: tuple[int, ...], sharding: list[list[str]], axes: set[str], mesh: MeshInfo
             ) -> list[list[list[str]]]:
    """Specs of a constrained value that keep the mesh axes ``axes`` (names, sub-axes by their axis) off the
    dimensions they shard in ``sharding`` (those an op reads along, which a collective gathers back): first
    moved to the last other dimension they divide (the value stays as sharded), then dropped."""
    dims = [list(d) for d in sharding] + [[] for _ in range(len(shape) - len(sharding))]
    read = [d for d, held in enumerate(dims) if any(a.split(":")[0] in axes for a in held)]
    dropped = [[a for a in held if a.split(":")[0] not in axes] for held in dims]
    moved = [list(held) for held in dropped]
    for d in read:
        leaving = [a for a in dims[d] if a.split(":")[0] in axes]
        k = prod(axis_label_size(a, mesh) for a in leaving)
        ways = [prod(axis_label_size(a, mesh) for a in held) for held in moved]
        fits = [e for e in range(len(shape)) if e not in read and shape[e] % (ways[e] * k) == 0]
        if not fits:
            moved = []
            break
        moved[fits[-1]] = moved[fits[-1]] + leaving
    if not read:
        return []
    return [moved, dropped] if moved and moved != dropped else [dropped]


@dataclass(frozen=True)
class PaddedValue:
    """A constrained value the compiled program holds padded."""

    constraint: StatedConstraint
    dtype: str  # HLO spelling
    local_shape: tuple[int, ...]  # per device, as compiled
    shards: int  # how many pieces the value is cut into
    uneven_dims: tuple[int, ...]

    @property
    def local_bytes(self) -> int:
        return array_bytes(self.dtype, self.local_shape)

    @property
    def even_bytes(self) -> float:
        """What a device would hold were the value split evenly."""
        return array_bytes(self.dtype, self.constraint.shape) / self.shards

    @property
    def padding_bytes(self) -> int:
        """Padding a device holds beyond an even split (rounded down)."""
        return self.local_bytes - int(self.even_bytes)


def padded_values(constraints: tuple[StatedConstraint, ...], mesh: MeshInfo,
                  compiled: frozenset[tuple[str, tuple[int, ...]]]) -> tuple[PaddedValue, ...]:
    """The constraints with a dimension their axes do not divide whose padded per-device shape the compiled
    program holds (``compiled``: (dtype, dims) of its values, hlo/layout_waste.py). One whose shape does
    not appear was fused away or kept whole: nothing is said of it."""
    uneven = [c for c in constraints if c.uneven_dims(mesh)]
    if not uneven:
        return ()
    out = []
    for c in uneven:
        ways = c.ways(mesh)
        local = tuple(-(-n // k) for n, k in zip(c.shape, ways))
        dtype = mlir_dtype_to_hlo(c.element_type)
        if (dtype, local) in compiled:
            out.append(PaddedValue(c, dtype, local, prod(ways), tuple(c.uneven_dims(mesh))))
    return tuple(out)
