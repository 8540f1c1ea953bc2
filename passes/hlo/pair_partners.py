"""The weight that reads a partial sum's result: the other half of the tensor-parallel pair a fix would make.

SL103 reports a matmul whose weight is sharded on the dimension it contracts, and its fix shards that weight on
the dimension it produces instead (column-parallel). The matmul that reads the result is then handed a split
activation: where its own weight is sharded on the dimension it produces too (a newcomer's other mistake: an
MLP's down projection on its output features, as if it were a column half), the fix that helps moves both, the
second weight onto the dimension its matmul contracts (row-parallel), as Megatron lays a pair out. Moving the
first alone leaves the second gathering the split activation back (transformers' Flax ViT: a trade-off, issue
46). ``pair_partners`` names, for each forward all-reduce of a matmul's partial sums, that second weight: the
one matmul by an entry parameter the sum's result reaches forward, through elementwise ops (a bias, an
activation) or attention's weightless matmuls and softmax's reductions (q, k and v projections read by the
output projection), never through a collective, a slice at the device's offset or another weight's matmul,
and never through the backward pass's ops. Operand identity only, as ``tensor_parallel_pairs`` reads the pair
the other way round.
"""

from __future__ import annotations

from ..common.device_groups import MeshInfo
from ..models.report import Collective, TensorInfo
from .collective_parameter import CollectiveParameter, ParameterRole, weight_of
from .fused_matmuls import fusion_body, matmuls_in
from .module import HloInstruction, HloModule
from .pass_direction import pass_op_name
from .value_origin import KEEPS_ORDER, OriginIndex, origin_index

# Ops a value passes on element by element (an activation, a bias, a scale), or only moves.
_ELEMENTWISE = KEEPS_ORDER | {
    "bitcast", "reshape", "get-tuple-element", "tanh", "logistic", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "negate", "abs", "sqrt", "rsqrt", "sine", "cosine", "erf", "power", "sign", "multiply", "add",
    "subtract", "divide", "maximum", "minimum", "select", "compare", "clamp"}
# What no elementwise fusion holds: a slice at the device's offset, a collective, a matmul.
_NOT_ELEMENTWISE = frozenset({"partition-id", "replica-id", "dynamic-slice", "all-reduce", "all-gather",
                              "reduce-scatter", "all-to-all", "collective-permute", "dot", "convolution"})
# Past attention's weightless matmul, softmax's reductions are followed too.
_IN_ATTENTION = frozenset({"reduce", "broadcast", "concatenate", "slice", "reverse"})
_SUMS = frozenset({"all-reduce", "reduce-scatter"})
_MAX_VISITS = 128
# Attention's two weightless matmuls (q k^T, probs v) at most between the halves.
_MAX_WEIGHTLESS = 2


def _passes_on(module: HloModule, user: HloInstruction, in_attention: bool) -> bool:
    if user.opcode in _ELEMENTWISE or (in_attention and user.opcode in _IN_ATTENTION):
        return True
    if user.opcode != "fusion":
        return False
    body = {i.opcode for i in fusion_body(module, user)}
    return not body & _NOT_ELEMENTWISE and (in_attention or "reduce" not in body)


def _reader(module: HloModule, start: str, inputs: dict[int, TensorInfo], index: OriginIndex,
            users: dict[str, list[HloInstruction]], sizes: dict[str, int]) -> CollectiveParameter | None:
    """The one weight whose forward matmul the value ``start`` reaches; None where none is, or several are."""
    found: dict[int, CollectiveParameter] = {}
    todo: list[tuple[str, int]] = [(start, 0)]  # (value, weightless matmuls passed)
    seen = {start}
    while todo and len(seen) < _MAX_VISITS:
        current, weightless = todo.pop(0)
        for user in users.get(current, ()):
            if user.name in seen or "transpose(" in (pass_op_name(user, module) or ""):
                continue
            seen.add(user.name)
            if matmuls_in(module, user):
                weight = weight_of(module, user, current, inputs, index, ParameterRole.feeds, sizes)
                if weight is not None:
                    found.setdefault(weight.index, weight)
                elif weightless < _MAX_WEIGHTLESS:
                    todo.append((user.name, weightless + 1))
            elif _passes_on(module, user, weightless > 0):
                todo.append((user.name, weightless))
    if len(found) != 1:
        return None
    [weight] = found.values()
    return weight if weight.contracting else None


def pair_partners(module: HloModule | None, collectives: tuple[Collective, ...], inputs: tuple[TensorInfo, ...],
                  mesh: MeshInfo) -> dict[str, CollectiveParameter]:
    """HLO name of each forward sum of a matmul's partial sums -> the weight of the one matmul its result feeds
    forward (``contracting``: that weight's dimensions the matmul contracts)."""
    if module is None or not inputs:
        return {}
    index, users = origin_index(module), module.users()
    by_number = {t.index: t for t in inputs}
    sizes = dict(mesh.axes)
    out: dict[str, CollectiveParameter] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind not in _SUMS or c.intent != "activation" or ins is None \
                or "transpose(" in (pass_op_name(ins, module) or ""):
            continue
        found = _reader(module, ins.name, by_number, index, users, sizes)
        if found is not None:
            out[c.hlo_name] = found
    return out
