"""The fixes of SL101's finding about the gathers a program's FFTs cause (passes/rules/fft_gathers.py),
compiled: the FFTs run under ``jax.shard_map`` on their batch (passes/stablehlo/fft_shard_map.py), alone
and with the argument the finding names moved off the dimensions they transform. The finding's own fix
(that argument moved) is compiled by the parameter fixes before; here the best of the three measured better
is printed, and where none is, what each was tried at and cost (issue 46: on jax 0.10.2 moving jax-cfd's
vorticity onto its batch still gathers every FFT, and only shard_map makes them local)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, TargetReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.fft_fixes import ffts_on_their_batch, is_fft_finding, on_the_batch
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ..adapter import jax_adapter
from ..context.config import Settings
from .candidate_compile import compiled_candidate
from .fix_verdicts import baseline, cost_text, for_finding, measured_check, not_offered_text, rematerializations
from .sharding_edits import with_entry_shardings
from .side_by_side import CompileCounter, compile_side_by_side


def with_fft_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                   progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each FFT finding's shard_map fixes compiled and the best measured better printed."""
    found = [k for k, f in enumerate(report.findings) if is_fft_finding(f)
             and (f.fix_check is None or f.fix_check.verdict is not FixVerdict.better)]
    if not found or report.memory is None:
        return report
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    mesh = sig.mesh_name or "mesh"
    sizes = dict(report.mesh)
    findings = list(report.findings)
    counter = CompileCounter(progress, report.name)
    for k in found:
        f = findings[k]
        axes = [a for a in dict.fromkeys(a.split(":")[0] for c in report.collectives
                                         if c.hlo_name in (f.ops or [f.subject or ""]) for a in c.mesh_axes)]
        candidates: list[tuple[str, str]] = []
        wrapped, n = ffts_on_their_batch(text, mesh, axes, sizes)
        if n:
            candidates.append((f"the FFTs under jax.shard_map over {', '.join(axes)} on their batch", wrapped))
        t = next((t for t in report.inputs if t.path == f.parameter), None)
        spec = on_the_batch(t, axes, sizes) if t is not None else None
        if t is not None and spec is not None and n:
            edited = with_entry_shardings(module, {}, mesh, {t.index: spec})
            both, _ = ffts_on_their_batch(edited, mesh, axes, sizes)
            candidates.append((f"{t.path} -> {pspec_text(spec)} with the FFTs under jax.shard_map over "
                               f"{', '.join(axes)} on their batch", both))
        if not candidates:
            continue
        labels = [c for c, _ in candidates]
        jobs: list[Callable[[], TargetReport]] = [
            functools.partial(compiled_candidate, report.name, edited_text, sig, settings, where, devices)
            for _, edited_text in candidates]
        outcomes = compile_side_by_side(jobs, counter.announce(labels, "to check the FFTs under shard_map"))
        base, written = baseline(report, sig), rematerializations(report)
        checks = [for_finding(f, measured_check(label, after, base, sig, written))
                  for label, after in zip(labels, outcomes)]
        findings[k] = _checked(f, checks, axes)
    return report.model_copy(update={"findings": findings})


def _checked(f: Finding, checks: list[FixCheck], axes: list[str]) -> Finding:
    """The best candidate measured better as the fix, with what was tried before it; else the finding's fix
    with each candidate's cost said."""
    better = [c for c in checks if c.verdict is FixVerdict.better]
    if better:
        best = min(better, key=lambda c: (c.traffic_bytes_after or 0, c.peak_bytes_after or 0))
        earlier = f.fix if f.fix_check is not None and f.fix_check.verdict is not FixVerdict.better else None
        others = [c for c in checks if c is not best]
        path, _, layout = best.change.partition(" -> ")
        fix = (f"run the FFTs under jax.shard_map over {', '.join(axes)} (in_specs and out_specs on the batch "
               f"dimension, e.g. around the vmap over it)"
               + (f" and give {path} the layout {layout.split(' with')[0]}" if layout else "")
               + f": each device transforms its own batch elements (checked: {cost_text(best)}; compiled as "
               f"{best.change})"
               + "".join(f"; {c.change} was tried too, compiled and {not_offered_text(c)}" for c in others)
               + (f"; before it, {earlier.removeprefix('no sharding change found that helps: ')}" if earlier else ""))
        return f.model_copy(update={"fix_check": best, "fix": fix, "suggested_sharding": None})
    tried = "".join(f"; {c.change} was tried, compiled and {not_offered_text(c)}" for c in checks)
    return f.model_copy(update={"fix": (f.fix or "") + tried})
