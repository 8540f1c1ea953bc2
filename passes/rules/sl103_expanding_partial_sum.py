"""SL103 expanding-partial-sum: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..hlo.collective_intent import parameters
from ..hlo.collective_parameter import CollectiveParameter, ParameterRole
from ..models.report import Collective, FixCandidate, Severity, TensorInfo
from ..models.rule_codes import SL103
from .context import RuleContext
from .parameter_advice import contracted_axes_moves, contracted_dims, moved_off, moved_onto, parameter_of
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

PARTIAL_SUM_EXPANSION = RuleOption(
    "partial-sum-expansion", 8.0, OptionKind.ratio,
    "all-reduced bytes over the bytes of the matmul operand that could be gathered instead")
PARTIAL_SUM_MIN_BYTES = RuleOption(
    "partial-sum-min-bytes", 4 * 1024**2, OptionKind.bytes,
    "smallest all-reduce of partial sums reported, or bytes per step of the sums one weight layout asks for")


def expanding_partial_sum(ctx: RuleContext, out: Emitter) -> None:
    """A matmul that contracts a sharded dimension into a much larger output, then all-reduces the whole output.

    What it does
    ------------
    Reports an all-reduce of a matmul's partial sums (tensor-parallel traffic,
    otherwise not warned about) whose per-device bytes (with those of the other
    values of one combined all-reduce that the same weight layout asks for: a
    gated MLP's two projections) reach `partial-sum-expansion` times the
    gathered size of the matmul's smaller operand, and at least
    `partial-sum-min-bytes`, or whose mistake does: every sum that the same
    weight layout asks for, with the same fix, counted together per step (one
    layer's q, k or v projection is small alone, and the fix removes them all).
    Also, at that size, one
    whose matmul's other operand each device cut from a value it holds whole,
    or scaled such a slice elementwise (the weight alone is sharded on the
    dimension the matmul contracts, not as the second half of a
    tensor-parallel pair, whose input arrives split); or one whose other
    operand is a norm of an activation split on the contracted dimension,
    its statistics summed over the same mesh axes (a LayerNorm between the
    matmul that split it and this one: the norm reads the activation whole,
    so the two are no tensor-parallel pair, and the sum is this weight's).
    Never the row-parallel half of a column/row pair (its input is an elementwise
    function of matmuls whose sharded weights produced the contracted dimension:
    an activation of one, or SwiGLU's gated product of two; and the sum returns to
    the pair's input width): Megatron's
    designed reduction, whatever its size; its collective says so in `why`. Nor an
    attention output projection's, sharded on the heads it contracts, whose
    input attention computed from the sums of q, k and v kernels reported here:
    their fix makes it that pair's row-parallel half.

    Why is this bad
    ---------------
    When the contracted dimension is sharded, every device computes partial sums
    of the whole output and the all-reduce adds them: each device then holds the
    full output. That is the right trade after a row-parallel projection, whose
    output is smaller than its input. For a projection that expands (a language
    model's logits: hidden size into vocabulary) it moves and holds the largest
    activation of the step, where gathering the small input and sharding the
    output would move a fraction of it.

    Example
    -------
    ```python
    embed = ...  # (vocab, d_model), sharded P(None, "model"): on d_model
    logits = jnp.einsum("bsd,vd->bsv", h, embed)   # contracts d_model: all-reduce of (b, s, vocab)
    ```

    Fix
    ---
    Shard the weight on its output dimension instead (here the vocabulary:
    `P("model", None)`), so the output stays sharded and only small
    statistics (a softmax's max and sum) are reduced. A weight on two mesh
    axes (FSDP with tensor parallelism: `P("data", "model")`, the output
    dimension already taken) has the summed axes moved beside the others
    (`P(None, ("model", "data"))`), each alone, or dropped: the finding's
    `candidates`, compiled in order, the first measured better printed.
    Where the matmul that reads the sum's result multiplies by a weight not
    sharded on the dimension it contracts (an MLP's down projection on its
    output features), the fix moves that weight too, onto the dimension it
    contracts, each with its optimizer state: a tensor-parallel pair, column-
    then row-parallel (every pair together, then each alone, then the weights
    alone, the first measured better printed). That weight's backward
    all-reduces of its whole input gradient are the finding's too.
    A replicated weight whose activation arrives split on the dimension the
    matmul contracts (each device multiplies its own slice of the weight: a
    tied embedding as the logits' decoder, the hidden states on "model") is
    given the summed axes on the dimension the matmul produces, its vocabulary:
    the activation is gathered instead and the output comes out sliced.
    """
    ratio = ctx.option(PARTIAL_SUM_EXPANSION)
    smallest = ctx.option(PARTIAL_SUM_MIN_BYTES)
    # A weight's gradient (a matmul over the batch, summed over the data axes) has the
    # weight's shape: data-parallel traffic, not an expanding projection. The weights are the parameters (the
    # state the step returns), not every input: a blackjax step's logits, f32[rows, chains per device], had the
    # shape of its data X, f32[rows, features], where the chains per device equalled the features (newbie17).
    weights = {tuple(t.shape) for t in parameters(ctx.inputs, ctx.roundtrips)}
    # A combined all-reduce's values are looked at one by one (each traced to its own matmul and weight):
    # a finding describes the value it is about, with its bytes.
    parts = [(whole, c) for whole in ctx.collectives for c in ctx.collective_parts.get(whole.hlo_name, (whole,))]
    found: list[_Sum] = []
    for whole, c in parts:
        operands = ctx.partial_sum_operands.get(c.hlo_name)
        # The row-parallel half of a column/row pair (Megatron's) sums by design, whatever its size: its
        # collective carries why (hlo/tensor_parallel_pairs.py).
        if operands is None or c.group_size < 2 or tuple(c.shape) in weights or c.hlo_name in ctx.row_parallel_sums:
            continue
        operand, weight_index = operands
        weight, served = parameter_of(ctx, c)
        if weight is None:
            weight = next((t for t in ctx.inputs if t.index == weight_index), None)
        gathered = operand * c.group_size
        sliced = c.hlo_name in ctx.sliced_partial_sums and weight is not None and bool(weight.sharding)
        normed = c.hlo_name in ctx.normalized_partial_sums and weight is not None and bool(weight.sharding)
        suggested, moves = _suggestion(ctx, c, weight, served)
        partner = _partner(ctx, c, weight) if suggested is not None and not moves else None
        contracted = tuple(sorted(contracted_dims(weight, served))) if weight is not None and served else ()
        found.append(_Sum(whole, c, weight, gathered, sliced, suggested, moves, contracted, c.bytes, partner, normed))
    found = _expanding(found, ratio)
    # An output projection sharded on the heads it contracts, after q, k and v kernels that summed their
    # outputs whole: its sum is the row-parallel half of the pair their fix makes, not a mistake of its own
    # (its fix would undo the pair: T5's o kernels moved with q, k and v measured no better).
    # A sum whose input is a norm (hlo/normalized_sums.py) reads no attention output: the walk past attention's
    # weightless matmuls reached it through a replicated projection and the norm (BERT laid out naively: its MLP's
    # up projection and the next layer's q, k and v were taken for output projections).
    flagged = {n for s in found for n in (s.whole.hlo_name, s.part.hlo_name)}
    found = [s for s in found if s.normed or not ctx.attention_inputs.get(s.part.hlo_name, frozenset()) & flagged]
    claimed: set[str] = set()
    for s in _worth_reporting(found, smallest):
        backward = _backward_sums(ctx, s, parts, claimed)
        claimed.update(b.hlo_name for b in backward)
        _emit(out, s, backward)


@dataclass(frozen=True)
class _Sum:
    """One all-reduce (or one value of a combined one) of a matmul's partial sums."""

    whole: Collective  # the collective as XLA runs it (the combined op where ``part`` is one of its values)
    part: Collective
    weight: TensorInfo | None
    gathered: int  # the matmul's smaller operand, gathered
    sliced: bool
    suggested: list[list[str]] | None
    moves: list[list[list[str]]]
    contracted: tuple[int, ...]  # the weight's dimensions the matmul contracts, where the compiled program shows
    # The bytes held against the ratio: the value's own, or with the other values of one combined all-reduce
    # that the same layout asks for (SwiGLU's gate and up projections of one input, summed together).
    judged: int
    # The weight of the matmul that reads this sum's result, and the layout that makes it the row-parallel half
    # of the pair the fix makes (its contracted dimension on the summed axes); None where it has it already.
    partner: tuple[TensorInfo, list[list[str]]] | None = None
    # The matmul's other operand is a norm of an activation split on the contracted dimension, its statistics
    # summed over the same axes (hlo/normalized_sums.py): the matmul before it and this one are no pair.
    normed: bool = False

    @property
    def mistake(self) -> tuple[object, ...]:
        """What the user wrote that asks for this sum: the weight's layout and the layout that keeps its output
        sharded (the q, k and v kernels of every layer given one wrong spec are one mistake); a sum whose
        weight has no stated layout is its own."""
        if self.weight is None or not self.weight.sharding or self.suggested is None:
            return ("alone", self.part.hlo_name)
        return (self.part.kind, pspec_text(self.weight.sharding), pspec_text(self.suggested))


def _expanding(found: list[_Sum], ratio: float) -> list[_Sum]:
    """The sums the ratio flags, or a sliced operand explains: the values of one combined all-reduce that one
    layout asks for (a gated MLP's two projections of one input, each half the combined op) are held against
    the ratio together, as one gather of their common input would replace them all."""
    together: dict[tuple[object, ...], int] = {}
    for s in found:
        key = (s.whole.hlo_name, s.gathered, s.mistake)
        together[key] = together.get(key, 0) + s.part.bytes
    judged = [dataclasses.replace(s, judged=together[(s.whole.hlo_name, s.gathered, s.mistake)])
              if s.mistake[0] != "alone" else s for s in found]
    # A sliced sum smaller than its operand gathered is never the rule's case: its fix (the output dimension
    # sharded) would gather more than the sum moves. On nnx_transformer a block's row-parallel down projection,
    # 2 MiB summed against 4 MiB gathered, was reported once sums were counted per mistake.
    # A norm between the matmul that split the activation and this one (its statistics summed over the sum's
    # axes) reads it whole: no pair, the sum is this weight's layout's, as a slice cut per device is (ViT's
    # intermediate kernel on its input features after a LayerNorm, 4x its operand gathered, issue 46).
    return [s for s in judged if ((s.sliced or s.normed) and s.judged >= s.gathered) or s.judged >= ratio * s.gathered]


def _worth_reporting(found: list[_Sum], smallest: float) -> list[_Sum]:
    """The sums whose mistake moves at least ``smallest`` bytes per step in all: one value of a combined
    all-reduce (penzai's gate and up projections, 2 MiB each in one 4 MiB op), or one layer's small sum, is
    judged with every other sum the same layout asks for, as one fix removes them all; in the order found."""
    total: dict[tuple[object, ...], int] = {}
    for s in found:
        total[s.mistake] = total.get(s.mistake, 0) + s.part.bytes * s.part.count
    return [s for s in found if s.part.bytes >= smallest or total[s.mistake] >= smallest]


def _partner(ctx: RuleContext, c: Collective, weight: TensorInfo | None
             ) -> tuple[TensorInfo, list[list[str]]] | None:
    """The weight whose matmul reads the sum's result (hlo/pair_partners.py), and its layout with the summed axes
    on the dimension that matmul contracts, where it holds them on a dimension the matmul keeps: moving the
    summed weight alone onto the dimension it produces would hand that matmul a split input to gather back."""
    found = ctx.pair_partners.get(c.hlo_name)
    partner = next((t for t in ctx.inputs if found is not None and t.index == found.index), None)
    if found is None or partner is None or weight is None or partner.index == weight.index:
        return None
    # Only a partner that holds the summed axes on a dimension its matmul keeps gathers the split input back: a
    # replicated one slices its own rows in place (its move would be a memory advice, not the pair's).
    summed = {a.split(":")[0] for a in c.mesh_axes}
    if not any(a.split(":")[0] in summed for d, axes in enumerate(partner.sharding or [])
               if d not in set(found.contracting or ()) for a in axes):
        return None
    row = moved_onto(partner, set(found.contracting or ()), list(c.mesh_axes), dict(ctx.signature.mesh.axes))
    return (partner, row) if row is not None else None


def _backward_sums(ctx: RuleContext, s: _Sum, parts: list[tuple[Collective, Collective]], claimed: set[str]
                   ) -> list[Collective]:
    """The backward pass's all-reduces of the partner's matmul's partial sums over the same axes (its input's
    gradient, contracted along the dimension the partner produces, split on them): the pair fix, which gives
    the partner its contracted dimension instead, removes them with this sum. Each claimed once."""
    if s.partner is None:
        return []
    index, axes = s.partner[0].index, set(s.part.mesh_axes)
    out: list[Collective] = []
    for _, c in parts:
        served = ctx.collective_parameters.get(c.hlo_name)
        if (served is None or served.index != index or served.role is not ParameterRole.partial_sums
                or c.kind != "all-reduce" or c.intent != "activation" or set(c.mesh_axes) != axes
                or "transpose(" not in (c.op_name or "") or c.hlo_name in claimed):
            continue
        out.append(c)
    return out


def _emit(out: Emitter, s: _Sum, backward: list[Collective]) -> None:
    whole, c, weight, gathered, sliced, suggested, moves = (s.whole, s.part, s.weight, s.gathered, s.sliced,
                                                            s.suggested, s.moves)
    axes = ", ".join(c.mesh_axes) or "all devices"
    out.emit(
        f"all-reduce over {axes} adds partial sums of the whole {c.dtype}{c.shape} output of a matmul "
        f"({format_bytes(c.bytes)} per device"
        + (f", one of the {len(whole.parts)} values {whole.hlo_name} moves together ({format_bytes(whole.bytes)})"
           if whole is not c else "")
        + (f", {c.count}x per step" if c.count > 1 else "")
        + (f"): {c.bytes / gathered:.0f}x its smaller operand gathered" if s.judged == c.bytes else
           f"): with the other values of the same layout in {whole.hlo_name} ({format_bytes(s.judged)}), "
           f"{s.judged / gathered:.0f}x the smaller operand of each, gathered")
        + f" ({format_bytes(gathered)}), because "
        + (f"{weight.path} {pspec_text(weight.sharding)} is sharded on the dimension it contracts"
           if weight is not None and any(weight.sharding or []) else
           f"the dimension it contracts is sharded on the activation side: {weight.path} is replicated "
           f"(P()) and each device multiplies its own slice of it, dimension {_dims_text(s.contracted)} of the "
           "argument" if weight is not None and s.contracted else "the dimension it contracts is sharded")
        + (" and its other operand is not (each device slices its part of a value it holds whole): the "
           "weight's layout alone asks for this sum, no tensor-parallel matmul before it" if sliced else "")
        + (" and its other operand is a norm of an activation split on that dimension, the norm's statistics "
           f"all-reduced over {axes}: the norm reads the activation whole, so the matmul that split it and this one "
           "are no tensor-parallel pair, and this weight's layout asks for the sum" if s.normed and not sliced else "")
        + (_partner_text(s.partner, backward) if s.partner is not None else ""),
        c.source, via=c.via,
        fix=(contracted_move_text(weight.path, suggested, weight.sharding, c.mesh_axes)
             if weight is not None and weight.sharding and moves and suggested else
             _replicated_move_text(weight.path, suggested, s.contracted, c.mesh_axes, gathered)
             if weight is not None and suggested and not any(weight.sharding or []) else
             f"shard {weight.path} as {pspec_text(suggested)} (the dimension this matmul produces) instead of "
             f"{pspec_text(weight.sharding)}, so the output stays sharded" if weight is not None and suggested
             else f"no fix compiled: shard {weight.path if weight is not None else 'the weight'} on the "
             "dimension this matmul produces instead of the one it contracts, so the output stays sharded "
             "(advice, not checked: "
             + _unchecked_reason(weight) + ")"),
        subject=whole.hlo_name, why=[c.why] if c.why else None, parameter=weight, suggested=suggested,
        total_bytes=c.bytes * c.count + sum(b.bytes * b.count for b in backward),
        ops=[whole.hlo_name, *(b.hlo_name for b in backward)] if backward else None,
        candidates=[FixCandidate(value=weight.path, sharding=m) for m in moves if weight is not None] or [
            FixCandidate(value=weight.path, sharding=suggested, together=[
                FixCandidate(value=s.partner[0].path, sharding=s.partner[1])])
            for _ in [0] if weight is not None and suggested is not None and s.partner is not None],
    )


def _partner_text(partner: tuple[TensorInfo, list[list[str]]], backward: list[Collective]) -> str:
    t = partner[0]
    text = (f"; the matmul that reads this sum multiplies by {t.path} {pspec_text(t.sharding)}, which is not "
            "sharded on the dimension it contracts (a tensor-parallel pair's row-parallel half)")
    if not backward:
        return text
    # Said per matmul, as the finding's message is (a finding grouped across layers keeps its first's words).
    sizes = sorted({f"{b.dtype}{b.shape}" for b in backward})
    return text + (f": it produces its output split, so the backward pass all-reduces that matmul's whole input "
                   f"gradient too ({', '.join(sizes)}, {format_bytes(sum(b.bytes * b.count for b in backward))} "
                   "per device)")


def _suggestion(ctx: RuleContext, c: Collective, weight: TensorInfo | None, served: CollectiveParameter | None
                ) -> tuple[list[list[str]] | None, list[list[list[str]]]]:
    """The weight's layout with the summed axes off the dimension the matmul contracts, and where no
    unsharded dimension can take them, each way of moving them (the fix check compiles each)."""
    if weight is None or (not any(weight.sharding or []) and (served is None or served.contracting is None)):
        return None, []
    dims = contracted_dims(weight, served)
    if not any(weight.sharding or []):  # the summed axes on the dimensions the matmul produces: a sliced output
        produced = set(range(len(weight.shape))) - dims
        return moved_onto(weight, produced, list(c.mesh_axes), dict(ctx.signature.mesh.axes)), []
    suggested = moved_off(weight, dims, dict(ctx.signature.mesh.axes))
    if suggested is not None:
        return suggested, []
    moves = contracted_axes_moves(weight, dims, list(c.mesh_axes), ctx.signature.mesh)
    return (moves[0] if moves else None), moves


def _unchecked_reason(weight: TensorInfo | None) -> str:
    # A fix is compiled only where it names an argument and its new layout (the fix checks' candidate).
    if weight is None:
        return "the weight is no argument of the step, so there is no argument layout to compile"
    if not weight.sharding:
        return (f"{weight.path} is replicated: the other operand's layout asks for this sum, and no layout of "
                "the weight to compile is named")
    return f"no dimension of {weight.path} can take its axes, so there is no layout to compile"


def _dims_text(dims: tuple[int, ...]) -> str:
    return " and ".join(str(d) for d in dims)


def _replicated_move_text(path: str, spec: list[list[str]], contracted: tuple[int, ...], summed: list[str],
                          gathered: int) -> str:
    """The fix for a replicated weight whose activation operand is split on the contracted dimension."""
    produced = [d for d, axes in enumerate(spec) if axes]
    axes = ", ".join(repr(a) for a in summed)
    return (f"shard {path} as {pspec_text(spec)} instead of P(), {axes} on its dimension "
            f"{_dims_text(tuple(produced))} (the one this matmul produces; it contracts dimension "
            f"{_dims_text(contracted)}): each device then multiplies the activation gathered on the contracted "
            f"dimension ({format_bytes(gathered)}) by its slice of the weight, a sliced output instead of partial "
            "sums all-reduced")


def contracted_move_text(path: str, spec: list[list[str]], written: list[list[str]], summed: list[str]) -> str:
    """The fix for one of ``contracted_axes_moves``' specs (the fix check words each candidate it compiles so)."""
    axes = ", ".join(repr(a) for a in summed)
    return (f"shard {path} as {pspec_text(spec)} instead of {pspec_text(written)}, keeping {axes} off the "
            "dimension this matmul contracts, so the output stays sharded and its partial sums are not all-reduced")

RULE = define_rule(SL103, Severity.warning, expanding_partial_sum,
                   options=(PARTIAL_SUM_EXPANSION, PARTIAL_SUM_MIN_BYTES),
                   traits=RuleTraits(fix=FixKind.parameter, argument_layout=True, about_traffic=True))
