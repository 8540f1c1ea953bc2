"""Two kinds of memory a compiled program spends on nothing, read from its HLO.

Padding. A dimension of n elements cut into k shards where k does not divide n: XLA's SPMD partitioner
gives every device ceil(n/k) of them (``pad`` to k*ceil(n/k), then ``dynamic-slice`` per device, and a
``select`` that masks the padding before reductions). The compiled module holds the value at that padded
per-device shape; that shape in the compiled HLO is the evidence the value was padded.

Donation. The module header's ``input_output_alias={ {out}: (param, {index}, may-alias) }`` lists each
parameter whose buffer an output reuses; ``buffer_donor={ (param, {}) }`` lists donated parameters no
output could reuse (XLA found no output of the same per-device shape, dtype and layout).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes, mlir_dtype_to_hlo, parse_arrays
from ..stablehlo.sharding_constraints import StatedConstraint
from .module import HloModule

_ALIAS = re.compile(r"\{[\d,\s]*\}:\s*\((\d+),\s*\{([\d,\s]*)\}")


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


def _compiled_shapes(hlo: HloModule) -> set[tuple[str, tuple[int, ...]]]:
    out = set()
    for comp in hlo.computations.values():
        for ins in comp.instructions:
            arrays = parse_arrays(ins.shape)
            out.update((a.dtype, tuple(a.dims)) for a in arrays)
    return out


def padded_values(constraints: tuple[StatedConstraint, ...], mesh: MeshInfo, hlo: HloModule) -> tuple[PaddedValue, ...]:
    """The constraints with a dimension their axes do not divide whose padded per-device shape the compiled
    program holds. (One whose shape does not appear was fused away or kept whole: nothing is said of it.)"""
    uneven = [c for c in constraints if c.uneven_dims(mesh)]
    if not uneven:
        return ()
    compiled = _compiled_shapes(hlo)
    out = []
    for c in uneven:
        ways = c.ways(mesh)
        local = tuple(-(-n // k) for n, k in zip(c.shape, ways))
        dtype = mlir_dtype_to_hlo(c.element_type)
        if (dtype, local) in compiled:
            out.append(PaddedValue(c, dtype, local, prod(ways), tuple(c.uneven_dims(mesh))))
    return tuple(out)


def aliased_parameters(hlo: HloModule) -> frozenset[int]:
    """The entry parameters (flattened argument numbers) an output's buffer reuses. A single tupled
    parameter (XLA tuples very long argument lists) is numbered by its tuple index."""
    text = hlo.header_attrs.get("input_output_alias", "")
    params = [i for i in hlo.entry_computation.instructions if i.opcode == "parameter"]
    tupled = len(params) == 1 and params[0].shape.startswith("(")
    out = set()
    for m in _ALIAS.finditer(text):
        index = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
        out.add(index[0] if tupled and index else int(m.group(1)))
    return frozenset(out)
