"""The HBM bytes each op of a ShardingGraph moves once XLA has fused it: what
``suggest``'s cost model charges an op besides its FLOPs."""

from __future__ import annotations

from ..common.shapes import array_bytes
from ..propagation.graph import ShardingGraph, Step

# Ops XLA fuses into their neighbours (loop and input fusions): what they read from
# a fused producer or hand to a fused consumer never goes through HBM.
_FUSIBLE = frozenset({
    "stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert", "stablehlo.transpose",
    "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.concatenate", "stablehlo.pad", "stablehlo.reverse",
    "stablehlo.iota", "stablehlo.constant", "stablehlo.select", "stablehlo.compare", "stablehlo.reduce",
    "stablehlo.clamp", "stablehlo.bitcast_convert",
})


class FusedTraffic:
    """HBM bytes each op moves once XLA has fused: a fusible op (elementwise, a
    broadcast, reshape, reduce...) reads only the operands an unfused op or the
    program produced and writes only the results an unfused op, a loop or the
    program reads. Without it every elementwise op of an optimizer update paid its
    full operands and result, and state left replicated cost several times what the
    compiled fusion does."""

    def __init__(self, g: ShardingGraph, returned: tuple[int, ...]):
        self.g = g
        fused_producer: set[int] = set()
        self.materialized: set[int] = set(returned)
        for step in g.steps:
            if step.is_edge or step.manual_axes is not None:
                self.materialized.update(step.tensors)  # loop carries, call boundaries, shard_map
            elif self.fusible(step):
                fused_producer.update(step.tensors[step.n_operands:])
            else:
                self.materialized.update(step.tensors[:step.n_operands])
        self.fused_producer = fused_producer - self.materialized

    def fusible(self, step: Step) -> bool:
        return step.op in _FUSIBLE or (step.rule.pass_through and not step.op.startswith(("func.", "sdy.")))

    def bytes(self, step: Step) -> int:
        def size(t: int) -> int:
            return array_bytes(self.g.tensors[t].dtype, list(self.g.tensors[t].shape))

        if not self.fusible(step):
            return sum(size(t) for t in step.tensors)
        reads = sum(size(t) for t in step.tensors[:step.n_operands] if t not in self.fused_producer)
        writes = sum(size(t) for t in step.tensors[step.n_operands:] if t in self.materialized)
        return reads + writes
