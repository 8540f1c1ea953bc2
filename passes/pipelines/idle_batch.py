"""What the analyzer's idle-batch fix stage (analyzer/backend/idle_batch_fixes.py) reads: which findings are
SL105's about a batch that leaves mesh axes idle (passes/rules/idle_batch_axes.py), and the layout each batch
argument is given."""

from __future__ import annotations

from jaxlib.mlir import ir

from ..common.data_parallel import batch_dimension, data_parallel_layout
from ..models.report import Finding, TensorInfo
from ..propagation.split_activations import argument_batch_dims
from ..rules.idle_batch_axes import IDLE_BATCH_WHY
from .catalogue import PARAMETER_FIXES


def is_idle_batch_finding(f: Finding) -> bool:
    """SL105's finding about a batch that leaves mesh axes idle (its first provenance line says so)."""
    return f.rule in PARAMETER_FIXES and f.provenance[:1] == [IDLE_BATCH_WHY]


def batch_layouts(module: ir.Module, named: list[TensorInfo], free: list[str], sizes: dict[str, int],
                  ) -> dict[int, list[list[str]]]:
    """Each of ``named``'s layouts with its batch dimension over every mesh axis in ``free``, by argument index:
    the dimension the step's matmuls batch over (a vmapped batch's), else dimension 0 where the argument is written
    split on it alone (passes/common/data_parallel.batch_dimension, as SL207 and SL105's idle-batch finding choose
    it); an argument with no batch dimension the axes divide is left out."""
    batch_dims = argument_batch_dims(module)
    layouts = {}
    for t in named:
        d = batch_dimension(t.shape, t.sharding, batch_dims.get(t.index, ()), free, sizes)
        layout = data_parallel_layout(t.shape, free, sizes, d) if d is not None else None
        if layout is not None:
            layouts[t.index] = layout
    return layouts
