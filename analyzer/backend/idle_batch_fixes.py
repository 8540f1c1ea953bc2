"""The fix of a finding about a batch that leaves mesh axes idle (SL105's, passes/rules/idle_batch_axes.py, and
SL207's), compiled: the batch arguments it names given suggest's data-parallel layout (dimension 0 over every
mesh axis of several devices, passes/common/data_parallel.py; a vmapped batch's dimension where the step's
matmuls batch over one), nothing else changed (no output pinned: the user pastes the batch's new PartitionSpec
and nothing more), compiled beside the program as written and printed only measured better; otherwise the
finding says what it was tried at and cost."""

from __future__ import annotations

from collections.abc import Callable

from ...passes.common.data_parallel import batch_dimension, data_parallel_layout
from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixVerdict
from ...passes.models.report import TargetReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ...passes.pipelines.idle_batch import is_idle_batch_finding
from ...passes.propagation.split_activations import argument_batch_dims
from ..adapter import jax_adapter
from ..context.config import Settings
from ..supervision import isolation
from .candidate_compile import compiled_beside_written
from .fix_verdicts import baseline, cost_text, for_finding, measured_check, not_offered_text, rematerializations
from .sharding_edits import with_entry_shardings


def check_idle_batch_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                           progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each idle-batch finding's fix compiled: printed with its figures where measured better,
    else the finding says what it cost."""
    found = [k for k, f in enumerate(report.findings) if is_idle_batch_finding(f) and f.fix_check is None]
    if not found:
        return report
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    sizes = dict(sig.mesh.axes)
    free = [a for a, n in sig.mesh.axes if n > 1]
    by_path = {t.path: t for t in report.inputs}
    batch_dims = argument_batch_dims(module)
    findings = list(report.findings)
    isolation.phase(where, "compiling the batch on every mesh axis to check it")
    for k in found:
        f = findings[k]
        named = [by_path[p] for p in f.parameters or [f.parameter or ""] if p in by_path]
        # Each argument's batch dimension as the finding chose it (passes/common/data_parallel.batch_dimension).
        dims = {t.index: batch_dimension(t.shape, t.sharding, batch_dims.get(t.index, ()), free, sizes) for t in named}
        moved = {t.index: layout for t in named if (d := dims[t.index]) is not None
                 and (layout := data_parallel_layout(t.shape, free, sizes, d)) is not None}
        if not named or len(moved) != len(named):
            continue
        specs = [pspec_text(moved[t.index]) for t in named]
        change = (f"{', '.join(t.path for t in named)} -> {specs[0]}" if len(set(specs)) == 1
                  else ", ".join(f"{t.path} -> {s}" for t, s in zip(named, specs, strict=True)))
        edited = with_entry_shardings(module, {}, sig.mesh_name or "mesh", moved)
        before, [after] = compiled_beside_written(report, text, [(change, edited)], sig, settings, where, devices,
                                                  progress)
        check = for_finding(f, measured_check(change, after, baseline(before, sig), sig, rematerializations(before)))
        if check.verdict is FixVerdict.better:
            findings[k] = f.model_copy(update={"fix_check": check, "suggested_sharding": moved[named[0].index],
                                               "fix": f"{f.fix} (checked: {cost_text(check)})"})
        else:
            findings[k] = f.model_copy(update={
                "fix_check": check,
                "fix": f"no sharding change found that helps: the batch on every mesh axis ({change}) was tried, "
                       f"compiled and {not_offered_text(check)}"})
    return report.model_copy(update={"findings": findings})
