"""SL101 replicating-collective: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.collective_values import values_text
from ..common.sharding_text import pspec_text
from ..hlo.collective_intent import INTENDED
from ..hlo.collective_origin import fft_caused
from ..hlo.collective_parameter import CollectiveParameter, ParameterRole
from ..models.report import Collective, Severity, TensorInfo
from ..models.rule_codes import SL101
from .constraint_cause import constraint_fix, constraint_of
from .context import RuleContext
from .fft_gathers import emit_fft_gathers, fft_gathers
from .parameter_advice import idle_axes, idle_axis_advice, sharding_advice
from .registry import Emitter, FixKind, OptionKind, Provenance, RuleOption, RuleTraits, define_rule

_REPLICATING = ("all-gather", "all-reduce")


REPLICATING_COLLECTIVE_BYTES = RuleOption(
    "replicating-collective-bytes", 256 * 1024**2, OptionKind.bytes,
    "per-device bytes at which any all-gather or all-reduce is reported")
WHOLE_ARRAY_GATHER_MIN_BYTES = RuleOption(
    "whole-array-gather-min-bytes", 1024**2, OptionKind.bytes,
    "smallest collective reported for rebuilding a whole sharded array")
REPLICATING_COLLECTIVE_PEAK_FRACTION = RuleOption(
    "replicating-collective-peak-fraction", 0.25, OptionKind.fraction,
    "share of the per-device peak at which an all-gather or all-reduce is reported")
REPLICATING_COLLECTIVE_MIN_BYTES = RuleOption(
    "replicating-collective-min-bytes", 4 * 1024**2, OptionKind.bytes,
    "smallest collective the peak-fraction criterion reports (tiny programs)")


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
    `whole-array-gather-min-bytes`. Traffic a stated sharding asks for (the
    collective's `intent`) is not reported, save one case: an all-gather that
    rebuilds a whole parameter for a matmul (FSDP's gather) on a mesh with an
    axis that shards no argument. The devices along that axis repeat each
    other's work, and the weight could stay sharded there, on the dimension
    the matmul does not contract, with nothing gathered. The same holds
    where no axis is idle but the gathered axes shard the batch too and
    another axis does not shard this weight: it could hold it there.

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
    A weight gathered beside an idle axis (`w` on `P("data", None)` with
    the batch on `data` and `model` idle, `x @ w`) goes on the idle axis,
    on the dimension the matmul keeps: `P(None, "model")`. A gather of what
    the user's own `with_sharding_constraint` shards (no argument causes it)
    is at that constraint's line where XLA gives the gather none, and its fix
    is the constraint with the gathered axes off the dimension the op reads
    along (moved to another dimension, or dropped): compiled and printed only
    when measured better, as every fix is. A value no argument reaches as the
    op's operand (carried through a loop, calls and elementwise ops) is named
    after the argument its propagation chain begins at, and that argument's
    move is the fix compiled. An FFT gathered along its batch alone (a batch
    of simulations sharded on the batch, which some XLA releases still
    transform replicated) needs no other sharding: its fix is the FFTs under
    `jax.shard_map` over the batch axis. The gathers of every FFT's operand
    (a spectral solver's inverse transforms and its forward one, at several
    lines) are one finding, naming the argument sharded on the gathered
    axes; its fixes (that argument off the transformed dimensions, the FFTs
    run under `jax.shard_map` on their batch, both) are compiled and the
    best measured better printed.
    """
    peak = ctx.memory.peak_bytes if ctx.memory else 0
    reported = replicating(ctx)
    # The gathers of the values a program's FFTs read are one cause (the layout of the argument they come
    # from), one finding whatever lines XLA gives them (fft_gathers.py).
    emit_fft_gathers(ctx, out, [c for c in reported if fft_caused(c.why)], peak)
    for c in reported:
        if fft_caused(c.why):
            continue
        idle = c.intent in INTENDED  # a parameter's gather replicating it beside an idle mesh axis
        parameter, served, suggested = (idle_axis_advice if idle else sharding_advice)(ctx, c)
        # No argument behind it: the user's constraint whose sharding it undoes, if one is (constraint_cause.py).
        constraint = constraint_of(ctx, c) if parameter is None else None
        undone = (f": it gathers back what the with_sharding_constraint at line {constraint.source.line} "
                  f"{pspec_text(constraint.sharding)} shards" if constraint is not None and constraint.source else "")
        # A gather XLA gave no line (the carry gathered back after its loop) is at the constraint's, and so is
        # one located at the jit call for the out_shardings it returns an output on (at_out_shardings): the
        # constraint it undoes is the nearer cause, and its fix the one compiled.
        placed = c.source is None or c.source == ctx.call_site
        source = constraint.source if undone and constraint is not None and placed else c.source
        changed = constraint_fix(ctx, c) if undone else None
        out.emit(
            message(ctx, c, peak, parameter, served) + undone + (_idle_text(ctx, c, suggested) if idle else ""),
            source,
            via=c.via if c.source else None,
            fix=(_idle_fix(ctx, parameter, suggested) if idle
                 else changed or fix(parameter, served, suggested)),
            subject=c.hlo_name, why=[c.why] if c.why else None, parameter=parameter, suggested=suggested,
            total_bytes=c.bytes * c.count, constraint=constraint if undone else None,
        )


def message(ctx: RuleContext, c: Collective, peak: int, parameter: TensorInfo | None,
            served: CollectiveParameter | None) -> str:
    """What the collective builds on every device, how often, its share of the peak, and how it relates
    to the parameter it serves."""
    whole = (c.dtype, tuple(c.shape)) in ctx.sharded_global_shapes and c.group_size > 1
    what = "rebuilds the whole array" if whole else "materialises"
    axes = ", ".join(c.mesh_axes) or "all devices"
    return (f"{c.kind} over {axes} {what} {values_text(c)} ({format_bytes(c.bytes)}) on every device"
            + (f", {c.count}x per step" if c.count > 1 else "")
            + (f" ({100 * c.bytes / peak:.0f}% of the {format_bytes(peak)} peak)" if peak else "")
            + (_relation(parameter, served.role, c.kind) if parameter is not None and served is not None else ""))


def fix(parameter: TensorInfo | None, served: CollectiveParameter | None,
        suggested: list[list[str]] | None) -> str:
    """The parameter's new sharding where the advice found one, else what to do at the op."""
    if parameter is not None and suggested:
        return (f"shard {parameter.path} as {pspec_text(suggested)} instead of {pspec_text(parameter.sharding)}"
                + (" (off the dimension this op reads along)"
                   if served and served.role in (ParameterRole.operand, ParameterRole.read)
                   else " (the dimension the matmul contracts, so its output is not split and not gathered)"
                   if served and served.role is ParameterRole.output
                   else " (off the dimensions the convolution sums over: its window and input features)"
                   if served and served.role is ParameterRole.convolution
                   else " (the dimension the matmul contracts, so it multiplies the shards in place)"))
    # Nothing names an argument or a constraint to change, so nothing can be compiled: said as advice, not a fix.
    return ("no fix compiled: no argument's or constraint's layout was found to reach this op (advice, not "
            "checked: shard a dimension this op does not read along, or keep the operand sharded with "
            "jax.lax.with_sharding_constraint before the op)")


def replicating(ctx: RuleContext) -> list[Collective]:
    """The collectives this rule reports."""
    big = ctx.option(REPLICATING_COLLECTIVE_BYTES)
    whole_min = ctx.option(WHOLE_ARRAY_GATHER_MIN_BYTES)
    peak = ctx.memory.peak_bytes if ctx.memory else 0
    share = ctx.option(REPLICATING_COLLECTIVE_PEAK_FRACTION) * peak if peak else float("inf")
    share_min = ctx.option(REPLICATING_COLLECTIVE_MIN_BYTES)
    # A value XLA could reshard only by replicating it is SL104's (the cause named by XLA itself).
    rematerialized = {r.collective for r in ctx.involuntary_remats}
    out = []
    for c in ctx.collectives:
        if c.kind not in _REPLICATING or c.hlo_name in rematerialized:
            continue
        # Intended traffic is not reported, save a gather of a whole parameter that an idle mesh axis
        # could hold instead (idle_axis_advice): the layout, not FSDP, puts it on every device.
        if c.intent in INTENDED and (c.intent != "parameter-gather" or idle_axis_advice(ctx, c)[2] is None):
            continue
        whole = (c.dtype, tuple(c.shape)) in ctx.sharded_global_shapes and c.group_size > 1
        large_share = c.bytes >= share and c.bytes >= share_min and c.group_size > 1
        if c.bytes >= big or large_share or (whole and c.bytes >= whole_min):
            out.append(c)
    # One FFT gather reported: every gather of an FFT's operand is (they have one cause, one finding).
    ffts = fft_gathers(ctx, rematerialized)
    if any(c in ffts for c in out):
        out += [c for c in ffts if c not in out]
    return out


def _idle_text(ctx: RuleContext, c: Collective, suggested: list[list[str]] | None) -> str:
    axes = [a for dim in (suggested or []) for a in dim]
    idle = [a for a in idle_axes(ctx) if a in axes]
    names = ", ".join(idle or axes)
    if not idle:  # spare_axes: the gathered axes shard the batch as well
        gathered = ", ".join(c.mesh_axes)
        return (f"; the batch is sharded on {gathered} too, so the matmul needs the weight whole on every "
                f"device, while {names}, which this weight does not use, could hold it on the dimension the "
                "matmul keeps")
    return (f"; the mesh axis {names} shards no argument (its devices repeat each other's work), so the "
            "weight could stay sharded on it instead" if len(idle) == 1 else
            f"; the mesh axes {names} shard no argument (their devices repeat each other's work), so the "
            "weight could stay sharded on them instead")


def _idle_fix(ctx: RuleContext, parameter: TensorInfo | None, suggested: list[list[str]] | None) -> str:
    assert parameter is not None and suggested is not None  # replicating() reports no other
    axes = [a for dim in suggested for a in dim]
    where = "the idle axis" if any(a in idle_axes(ctx) for a in axes) else "an axis the batch does not use"
    return (f"shard {parameter.path} as {pspec_text(suggested)} instead of {pspec_text(parameter.sharding)} "
            f"(on {where}, the dimension the matmul keeps: it multiplies the shards in place and "
            "nothing gathers the weight)")


def _relation(t: TensorInfo, role: ParameterRole, kind: str) -> str:
    spec = pspec_text(t.sharding)
    if role is ParameterRole.operand:
        return f": it gathers {t.path} {spec}"
    if role is ParameterRole.read:
        combines = "sums" if kind == "all-reduce" else "concatenates"
        return f": it {combines} what each device read of {t.path} {spec} along a sharded dimension"
    if role is ParameterRole.partial_sums and kind == "all-reduce":
        return f": it sums the partial products of the matmul by {t.path} {spec}"
    if role is ParameterRole.output:
        return f": it gathers the output of the matmul by {t.path} {spec}, split as that weight's output features are"
    if role is ParameterRole.convolution:
        return f": XLA emits it for the convolution by {t.path} {spec}"
    return f": the matmul by {t.path} {spec} reads it whole"

RULE = define_rule(SL101, Severity.warning, replicating_collective,
                   options=(REPLICATING_COLLECTIVE_BYTES, WHOLE_ARRAY_GATHER_MIN_BYTES,
                            REPLICATING_COLLECTIVE_PEAK_FRACTION, REPLICATING_COLLECTIVE_MIN_BYTES),
                   traits=RuleTraits(provenance=Provenance.predicted_collective, fix=FixKind.parameter,
                                     argument_layout=True, about_traffic=True, boundary_collectives=True,
                                     claims=lambda ctx: [c.hlo_name for c in replicating(ctx)]))
