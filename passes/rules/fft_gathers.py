"""SL101's finding about the gathers a program's FFTs cause: one finding for all of them.

A spectral solver transforms the same sharded state at several lines (jax-cfd's pseudospectral
Navier-Stokes: four inverse FFTs of the velocity and the vorticity gradient, one forward FFT of the
advection term, each RK stage). Where XLA gathers each FFT's operand whole (a transformed dimension
sharded; or, on some releases, a batch-sharded FFT computed replicated), the gathers have one cause, the
layout of the argument the state comes from, and one fix: one finding, at the first line, with every
gather counted in it (the small ones too, which otherwise fall under SL105's summary line). It names the
argument sharded on the gathered axes and, where those axes shard a dimension the FFTs transform, the
argument with them moved off as the fix to compile; the analyzer also compiles the FFTs run under
``jax.shard_map`` on their batch (analyzer/backend/fft_fixes.py) and prints the best measured better.
"""

from __future__ import annotations

from collections.abc import Collection

from ..common.byte_sizes import format_bytes
from ..common.collective_values import values_text
from ..common.sharding_text import pspec_text
from ..common.word_lists import listed
from ..hlo.collective_intent import INTENDED
from ..hlo.collective_origin import FFT_COMPUTED_REPLICATED, fft_caused
from ..models.report import Collective, TensorInfo
from .context import RuleContext
from .parameter_advice import moved_off
from .registry import Emitter


def fft_gathers(ctx: RuleContext, rematerialized: Collection[str | None] = ()) -> list[Collective]:
    """Every all-gather XLA inserts before an FFT that no stated sharding asked for (collective_origin's why)."""
    return [c for c in ctx.collectives if c.kind == "all-gather" and c.intent not in INTENDED
            and c.hlo_name not in rematerialized and fft_caused(c.why)]


def _bare(axis: str) -> str:
    return axis.split(":")[0]


def fft_argument(ctx: RuleContext, gathers: list[Collective]) -> TensorInfo | None:
    """The one argument sharded on the gathered axes (the state the FFTs transform comes from); None where
    none is, or several are (then the finding names none)."""
    axes = {_bare(a) for c in gathers for a in c.mesh_axes}
    held = [t for t in ctx.inputs if any(_bare(a) in axes for dim in (t.sharding or []) for a in dim)]
    return held[0] if len(held) == 1 else None


def emit_fft_gathers(ctx: RuleContext, out: Emitter, gathers: list[Collective], peak: int) -> None:
    """One SL101 finding for ``gathers`` (the FFTs' gathers SL101 reports), where there are any."""
    if not gathers:
        return
    ordered = sorted(gathers, key=lambda c: (c.source is None, c.source.line if c.source else 0, c.hlo_name))
    first = ordered[0]
    batch_only = all(FFT_COMPUTED_REPLICATED in (c.why or "") for c in gathers)
    parameter = fft_argument(ctx, gathers)
    suggested = None
    if parameter is not None and not batch_only:
        axes = {_bare(a) for c in gathers for a in c.mesh_axes}
        dims = {d for d, held in enumerate(parameter.sharding or []) if any(_bare(a) in axes for a in held)}
        suggested = moved_off(parameter, dims, dict(ctx.signature.mesh.axes))
    total = sum(c.bytes * c.count for c in gathers)
    count = sum(c.count for c in gathers)
    lines = sorted({c.source.line for c in gathers if c.source is not None})
    shapes = list(dict.fromkeys(f"{values_text(c)} ({format_bytes(c.bytes)})" for c in ordered))
    axes_text = ", ".join(dict.fromkeys(a for c in gathers for a in c.mesh_axes))
    largest = max(c.bytes for c in gathers)
    where = (f"at lines {', '.join(map(str, lines[:-1]))} and {lines[-1]}" if len(lines) > 1
             else f"at line {lines[0]}" if lines else "in the step")
    message = (f"all-gather over {axes_text} rebuilds each FFT's operand whole on every device before it is "
               f"transformed: {len(gathers)} gathers {where}, {count}x per step, {format_bytes(total)} per step "
               f"in all, of {listed(shapes)}"
               + (f" (each up to {100 * largest / peak:.0f}% of the {format_bytes(peak)} peak)" if peak else "")
               + (f": they come from {parameter.path} {pspec_text(parameter.sharding or [])}"
                  if parameter is not None else ""))
    if suggested is not None and parameter is not None:
        fix = (f"shard {parameter.path} as {pspec_text(suggested)} instead of {pspec_text(parameter.sharding or [])} "
               "(off the dimensions the FFTs transform)")
    else:
        fix = batched_fft_fix(axes_text)
    out.emit(message, first.source, via=first.via, fix=fix, subject=first.hlo_name,
             why=[first.why] if first.why else None, parameter=parameter, suggested=suggested,
             total_bytes=total, count=count, ops=[c.hlo_name for c in ordered])


def batched_fft_fix(axes: str) -> str:
    """The fix of an FFT gathered along its batch alone, before it is compiled (fft_fixes.py checks it)."""
    return (f"keep the batch sharded and run the FFTs under jax.shard_map over {axes} (in_specs and out_specs on "
            "the batch dimension): each device transforms its own batch elements and nothing is gathered; no "
            "sharding of the jitted step's arguments does better, the dimensions the FFT transforms are whole "
            "already")
