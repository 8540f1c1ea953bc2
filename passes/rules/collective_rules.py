"""Rules over the collectives of the compiled program."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..hlo.collective_intent import INTENDED
from ..models.report import Severity
from .context import RuleContext
from .registry import Emitter, RuleOption, rule

_REPLICATING = ("all-gather", "all-reduce")


@rule(
    "SL101", "replicating-collective", Severity.warning,
    options=(
        RuleOption("replicating-collective-bytes", 256 * 1024**2, "bytes",
                   "per-device bytes at which any all-gather or all-reduce is reported"),
        RuleOption("whole-array-gather-min-bytes", 1024**2, "bytes",
                   "smallest collective reported for rebuilding a whole sharded array"),
        RuleOption("replicating-collective-peak-fraction", 0.25, "fraction",
                   "share of the per-device peak at which an all-gather or all-reduce is reported"),
        RuleOption("replicating-collective-min-bytes", 4 * 1024**2, "bytes",
                   "smallest collective the peak-fraction criterion reports (tiny programs)"),
    ),
)
def replicating_collective(ctx: RuleContext, out: Emitter) -> None:
    """A collective that builds a large array on every device.

    What it does
    ------------
    Reports an all-gather or all-reduce whose per-device result reaches
    `replicating-collective-bytes` (absolute), or `replicating-collective-peak-fraction`
    of the per-device peak (relative: at a size a user lints at, 128 MiB can be
    half the peak; at least `replicating-collective-min-bytes`), or whose
    per-device result has the global shape of an array the program holds sharded
    (the collective rebuilds the whole array on every device) and reaches
    `whole-array-gather-min-bytes`.

    Why is this bad
    ---------------
    Sharding an array saves memory only while it stays sharded. When an op reads
    along a sharded dimension (a gather, an interpolation, a dot that contracts
    it), XLA gathers the whole array onto every device first: each device then
    holds the full array, and the gather's bytes grow with the array, not with
    the shard. One team saw 1-1.9 TiB per device and a 2.8x slowdown this way.

    Example
    -------
    ```python
    table = jax.ShapeDtypeStruct((n_states, n_grid), f32,
                                 sharding=NamedSharding(mesh, P(None, "x")))
    jnp.interp(points, grid, table[i])   # reads along the sharded grid axis
    ```

    Fix
    ---
    Shard a dimension the op does not read along (here the state axis,
    `P("x", None)`), or constrain the operand with
    `jax.lax.with_sharding_constraint` so the op runs where the shards are.
    """
    big = ctx.options["replicating-collective-bytes"]
    whole_min = ctx.options["whole-array-gather-min-bytes"]
    peak = ctx.memory.peak_bytes if ctx.memory else 0
    share = ctx.options["replicating-collective-peak-fraction"] * peak if peak else float("inf")
    share_min = ctx.options["replicating-collective-min-bytes"]
    for c in ctx.collectives:
        if c.kind not in _REPLICATING or c.intent in INTENDED:
            continue
        whole = (c.dtype, tuple(c.shape)) in ctx.sharded_global_shapes and c.group_size > 1
        large_share = c.bytes >= share and c.bytes >= share_min and c.group_size > 1
        if c.bytes >= big or large_share or (whole and c.bytes >= whole_min):
            what = "rebuilds the whole array" if whole else "materialises"
            axes = ", ".join(c.mesh_axes) or "all devices"
            out.emit(
                f"{c.kind} over {axes} {what} {c.dtype}{c.shape} ({format_bytes(c.bytes)}) on every device"
                + (f", {c.count}x per step" if c.count > 1 else "")
                + (f" ({100 * c.bytes / peak:.0f}% of the {format_bytes(peak)} peak)" if peak else ""),
                c.source, via=c.via,
                fix="shard a dimension this op does not read along, or keep the operand sharded with "
                "jax.lax.with_sharding_constraint before the op",
                subject=c.hlo_name, why=[c.why] if c.why else None,
            )


@rule(
    "SL102", "collective-in-loop", Severity.warning,
    options=(RuleOption("loop-collective-bytes", 512 * 1024**2, "bytes",
                        "bytes per step (bytes times executions, summed per source line) at which collectives "
                        "in a loop are reported"),),
)
def collective_in_loop(ctx: RuleContext, out: Emitter) -> None:
    """A collective inside a loop body, weighted by the loop's trip count.

    What it does
    ------------
    Reports the resharding collectives of one source line that run more than
    once per step (inside a `scan`, `fori_loop` or `while_loop` body) when their
    bytes times their execution counts, summed, reach `loop-collective-bytes`.
    Traffic the sharding asked for (a layer's FSDP parameter gather, a gradient
    reduction, tensor-parallel partial sums: the collective's `intent`) is
    counted but not reported.

    Why is this bad
    ---------------
    A collective in a loop body runs on every iteration. Re-laying out the
    carry, or gathering a value that does not change across iterations, moves
    the same bytes each time; a layer scan over 48 layers multiplies a small
    collective 48-fold.

    Example
    -------
    ```python
    def body(h, _):
        h = jax.lax.with_sharding_constraint(h, P("data", "model"))
        return jnp.cumsum(h, axis=1), None  # reads along the model-sharded axis
    h, _ = jax.lax.scan(body, x, None, length=48)
    ```

    Fix
    ---
    Keep the loop's values in the layout the body reads them in (constrain the
    carry to a sharding the body does not read along), or hoist a gather of a
    loop-invariant value out of the loop.
    """
    limit = ctx.options["loop-collective-bytes"]
    # One finding per source line: a layer scan's many per-layer collectives are one decision.
    by_line: dict[tuple, list] = {}
    for c in ctx.collectives:
        if c.count > 1 and c.intent not in INTENDED:
            key = (c.source.file, c.source.line) if c.source else (c.hlo_name,)
            by_line.setdefault(key, []).append(c)
    for group in by_line.values():
        total = sum(c.bytes * c.count for c in group)
        if total < limit:
            continue
        counts = sorted({c.count for c in group})
        kinds = ", ".join(
            f"{n}x {k}" if n > 1 else k
            for k, n in sorted({c.kind: sum(1 for g in group if g.kind == c.kind) for c in group}.items())
        )
        axes = ", ".join(sorted({a for c in group for a in c.mesh_axes})) or "all devices"
        runs = f"{counts[0]}x" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}x"
        out.emit(
            f"{kinds} over {axes} run {runs} per step in a loop: {format_bytes(total)} per step per device",
            group[0].source, via=group[0].via,
            fix="keep the loop's values in the layout the body reads them in (a carry sharded on an axis the "
            "body does not read along), or gather a loop-invariant value once before the loop",
            subject=group[0].hlo_name, why=sorted({c.why for c in group if c.why}) or None,
        )


@rule(
    "SL103", "expanding-partial-sum", Severity.warning,
    options=(
        RuleOption("partial-sum-expansion", 8.0, "fraction",
                   "all-reduced bytes over the bytes of the matmul operand that could be gathered instead"),
        RuleOption("partial-sum-min-bytes", 4 * 1024**2, "bytes",
                   "smallest all-reduce of partial sums reported"),
    ),
)
def expanding_partial_sum(ctx: RuleContext, out: Emitter) -> None:
    """A matmul that contracts a sharded dimension into a much larger output, then all-reduces the whole output.

    What it does
    ------------
    Reports an all-reduce of a matmul's partial sums (tensor-parallel traffic,
    otherwise not warned about) whose per-device bytes reach
    `partial-sum-expansion` times the gathered size of the matmul's smaller
    operand, and at least `partial-sum-min-bytes`.

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
    statistics (a softmax's max and sum) are reduced.
    """
    ratio = ctx.options["partial-sum-expansion"]
    smallest = ctx.options["partial-sum-min-bytes"]
    # A weight's gradient (a matmul over the batch, summed over the data axes) has the
    # weight's shape: data-parallel traffic, not an expanding projection.
    weights = {tuple(t.shape) for t in ctx.inputs}
    for c in ctx.collectives:
        found = ctx.partial_sum_operands.get(c.hlo_name)
        if found is None or c.bytes < smallest or c.group_size < 2 or tuple(c.shape) in weights:
            continue
        operand, weight_index = found
        weight = next((t for t in ctx.inputs if t.index == weight_index), None)
        gathered = operand * c.group_size
        if c.bytes < ratio * gathered:
            continue
        axes = ", ".join(c.mesh_axes) or "all devices"
        out.emit(
            f"all-reduce over {axes} adds partial sums of the whole {c.dtype}{c.shape} output of a matmul "
            f"({format_bytes(c.bytes)} per device"
            + (f", {c.count}x per step" if c.count > 1 else "")
            + f"): {c.bytes / gathered:.0f}x its smaller operand gathered ({format_bytes(gathered)}), because "
            + (f"{weight.path} {pspec_text(weight.sharding)} is sharded on the dimension it contracts"
               if weight is not None and weight.sharding else "the dimension it contracts is sharded"),
            c.source, via=c.via,
            fix=f"shard {weight.path if weight is not None else 'the weight'} on the dimension this matmul "
            "produces instead of the one it contracts, so the output stays sharded",
            subject=c.hlo_name, why=[c.why] if c.why else None,
        )
