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

from ..common.shapes import parse_arrays
from .module import HloModule

_ALIAS = re.compile(r"\{[\d,\s]*\}:\s*\((\d+),\s*\{([\d,\s]*)\}")


def compiled_shapes(hlo: HloModule) -> frozenset[tuple[str, tuple[int, ...]]]:
    """(dtype, per-device dims) of every value the compiled module holds."""
    out: set[tuple[str, tuple[int, ...]]] = set()
    for comp in hlo.computations.values():
        for ins in comp.instructions:
            out.update((a.dtype, tuple(a.dims)) for a in parse_arrays(ins.shape))
    return frozenset(out)


def aliased_parameters(hlo: HloModule) -> frozenset[int]:
    """The entry parameters (flattened argument numbers) an output's buffer reuses. A single tupled
    parameter (XLA tuples very long argument lists) is numbered by its tuple index."""
    text = hlo.header_attrs.get("input_output_alias", "")
    params = [i for i in hlo.entry_computation.instructions if i.opcode == "parameter"]
    tupled = len(params) == 1 and params[0].shape.startswith("(")
    out: set[int] = set()
    for m in _ALIAS.finditer(text):
        index = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
        out.add(index[0] if tupled and index else int(m.group(1)))
    return frozenset(out)
