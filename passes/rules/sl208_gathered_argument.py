"""SL208 gathered-argument: the check, whose docstring is the rule's documentation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..hlo.collective_parameter import ParameterRole
from ..models.fix_check import FixCheck, FixVerdict
from ..models.report import Collective, Severity, TensorInfo
from ..models.rule_codes import SL208
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

GATHERED_ARGUMENT_PEAK_FRACTION = RuleOption(
    "gathered-argument-peak-fraction", 0.25, OptionKind.fraction,
    "share of the per-device peak that the values read from a gathered argument must hold to report it")
GATHERED_ARGUMENT_EXPANSION = RuleOption(
    "gathered-argument-expansion", 8.0, OptionKind.ratio,
    "how many times the whole argument a value read from its gathered copy must be to count")


@dataclass(frozen=True)
class GatheredArgument:
    """An argument the program gathers whole, and what the values read from its gathered copies hold at the peak."""

    argument: TensorInfo
    gathers: tuple[Collective, ...]
    read_bytes: int  # live at the peak, in values each at least the expansion times the argument


def gathered_argument(ctx: RuleContext, out: Emitter) -> None:
    """A small argument split over the mesh is gathered whole, and what is read from it fills the peak.

    What it does
    ------------
    Reports an argument that is sharded, does not come back as an output (a
    data array, not the step's state), and that one or several all-gathers
    rebuild whole on every device, where the values XLA reads out of the
    gathered copies (each at least `gathered-argument-expansion` times the
    whole argument: a pairwise cost matrix read from a point cloud) hold at
    least `gathered-argument-peak-fraction` of the per-device peak. It is
    triggered by the peak those gathers are behind, not by their size: each
    gather can be far under SL101's thresholds (ott's Sinkhorn gathers an
    8 MiB point cloud three times, one of them in its loop, under a 2.5 GiB
    peak). With the fixes checked (lint's default), the argument replicated
    is compiled, and the finding stands only where that is measured better
    and lowers the peak by `gathered-argument-peak-fraction` of it: the peak
    those gathers cause is what the compile measures, and a finding whose fix
    does not do that is dropped, with a line in the report's warnings saying
    what it measured (with `--no-fix-check` nothing is measured: the finding
    stands on what the gathered copies are read into, its fix unchecked).
    Gathers another rule reports are that rule's.

    Why is this bad
    ---------------
    Splitting a small array saves a few MiB per device, and XLA gathers it
    back wherever an op reads it whole. The values computed from the gathered
    copies are laid out differently from those computed from an argument
    every device holds, and XLA keeps more of them live: with both point
    clouds of a Sinkhorn solve split on the same axis, XLA holds 2.5 GiB per
    device, against 1.0 GiB with the second cloud replicated.

    Example
    -------
    ```python
    x = jax.ShapeDtypeStruct((32768, 64), f32, sharding=NamedSharding(mesh, P("data")))
    y = jax.ShapeDtypeStruct((32768, 64), f32, sharding=NamedSharding(mesh, P("data")))
    cost = jnp.sum((x[:, None] - y[None]) ** 2, -1)   # every row of x against all of y
    ```

    Fix
    ---
    Replicate the small argument (`P()`): each device holds it whole once,
    and nothing gathers it. The fix is compiled and printed only when
    measured better, with what it does to the peak and the traffic.
    """
    for g in gathered(ctx):
        t, peak = g.argument, ctx.memory.peak_bytes if ctx.memory else 0
        in_loops = sum(1 for c in g.gathers if c.count_is_lower_bound or c.count_upper_bound or c.count > 1)
        n = len(g.gathers)
        gathers = f"{n} all-gathers" if n > 1 else "an all-gather"
        loops = (f", {in_loops} of them in a loop" if n > 1 else ", in a loop") if in_loops else ""
        out.emit(
            f"argument {t.path} ({t.dtype}{t.shape}, {format_bytes(t.bytes)}) {pspec_text(t.sharding)} is gathered "
            f"whole onto every device by {gathers}{loops}, and the values read from the gathered copies hold "
            f"{format_bytes(g.read_bytes)} ({100 * g.read_bytes / peak:.0f}% of the {format_bytes(peak)} peak)",
            ctx.input_source(t.index),
            fix=f"replicate {t.path}: P() instead of {pspec_text(t.sharding)} ({format_bytes(t.bytes)} whole on "
                "every device, and nothing gathers it)",
            subject=t.path, parameter=t, suggested=[[] for _ in t.shape],
            total_bytes=sum(c.bytes * c.count for c in g.gathers), ops=[c.hlo_name for c in g.gathers],
        )


def gathered(ctx: RuleContext) -> list[GatheredArgument]:
    """The arguments this rule reports, with their gathers."""
    peak = ctx.memory.peak_bytes if ctx.memory else 0
    if not peak or ctx.num_devices <= 1 or ctx.memory is None:
        return []
    state = {rt.input.index for rt in ctx.roundtrips}
    # Gathers another rule reports are its own (while the claims are being found: those of the rules before it).
    others = frozenset(n for code, names in ctx.claims_by_rule.items() if code != SL208.code for n in names) \
        if ctx.claims_by_rule else ctx.claimed_collectives
    expansion = ctx.option(GATHERED_ARGUMENT_EXPANSION)
    live: dict[str, int] = {}
    for b in ctx.memory.live_at_peak:
        live[b.name.split("{")[0]] = live.get(b.name.split("{")[0], 0) + b.bytes
    out = []
    for t in ctx.inputs:
        if t.index in state or not any(t.sharding or []):
            continue
        gathers = tuple(c for c in ctx.collectives if c.kind == "all-gather" and _gathers_whole(ctx, c, t))
        if not gathers or any(c.hlo_name in others for c in gathers):
            continue
        readers = {r for c in gathers for r in ctx.gather_readers.get(c.hlo_name, ())}
        read = sum(live[r] for r in readers if live.get(r, 0) >= expansion * t.bytes)
        if read >= ctx.option(GATHERED_ARGUMENT_PEAK_FRACTION) * peak:
            out.append(GatheredArgument(t, gathers, read))
    return out


def _gathers_whole(ctx: RuleContext, c: Collective, t: TensorInfo) -> bool:
    """The all-gather moves argument ``t`` itself and its result is the whole array (in any layout: ``y.T``'s
    gather is of f32[16, 4096] for a (4096, 16) argument)."""
    served = ctx.collective_parameters.get(c.hlo_name)
    return (served is not None and served.index == t.index and served.role is ParameterRole.operand
            and c.bytes == t.bytes and c.dtype == t.dtype)


def measured_enough(check: FixCheck, options: dict[str, Any]) -> bool:
    """The argument replicated is measured better, its peak lower by `gathered-argument-peak-fraction` of the peak
    as written: the peak the gathers cause, as the compile measures it (traffic alone is not this rule's)."""
    fall = check.peak_bytes_before - (check.peak_bytes_after or check.peak_bytes_before)
    return (check.verdict is FixVerdict.better
            and fall >= options[GATHERED_ARGUMENT_PEAK_FRACTION.name] * check.peak_bytes_before)


RULE = define_rule(SL208, Severity.warning, gathered_argument,
                   options=(GATHERED_ARGUMENT_PEAK_FRACTION, GATHERED_ARGUMENT_EXPANSION),
                   traits=RuleTraits(fix=FixKind.parameter, measured_enough=measured_enough,
                                     claims=lambda ctx: [c.hlo_name for g in gathered(ctx) for c in g.gathers]))
