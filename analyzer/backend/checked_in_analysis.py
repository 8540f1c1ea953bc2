"""Checked-in programs analysed without running any Python from them: a StableHLO
text compiled on the run's devices, compiled HLO text (an XLA dump, with its
buffer-assignment and live-range reports beside it), and ``check``'s walk over
files and dump folders (``check_path``, checked_in_check.py). Reading and validating the files is
inputs/checked_in.py.
"""
from __future__ import annotations

import dataclasses
import os

from ...passes.models.report import TargetReport
from ...passes.pipelines.check import analyze_hlo_only
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.lint import LINT, ConflictCheck, analyze_target
from ..adapter import jax_adapter
from ..context.config import Settings
from ..context.display_paths import display_source
from ..errors import ShardLintInputError, one_line
from ..inputs.checked_in import (
    HLO_SUFFIX,
    dump_module_name,
)
from ..inputs.files import read_input_text
from ..supervision import isolation
from . import compile_memo
from .target_analysis import program_facts
from .tpu_dump_memory import NOT_LISTED

# A kernel's custom call that only its platform's compiler implements (Pallas on TPU: Mosaic;
# Pallas on GPU: Triton or Mosaic GPU): XLA on another platform says only that it has no implementation.
_KERNEL_PLATFORMS = (
    ("tpu_custom_call", "a TPU Pallas (Mosaic) kernel", "tpu", "--platform tpu-v5e (or tpu-v4, tpu-v5p, tpu-v6e: the "
     "TPU it was written for)"),
    ("triton_kernel_call", "a GPU Pallas (Triton) kernel", "gpu", "--platform h100 (or h200, b200, a100-80g, "
     "a100-40g: the GPU it was written for)"),
    ("mosaic_gpu", "a GPU Pallas (Mosaic GPU) kernel", "gpu", "--platform h100 (or h200, b200: the GPU it was "
     "written for)"),
)


def kernel_platform_hint(message: str, platform: str | None) -> str:
    """'; the module holds a TPU kernel ...: give --platform ...' where a compile failed on a
    kernel that the platform compiled for cannot run, else ''."""
    if "No registered implementation" not in message:
        return ""
    for call, what, family, option in _KERNEL_PLATFORMS:
        if call in message and not (platform or "cpu").startswith(family) and not (
                family == "gpu" and platform in ("h100", "h200", "b200", "a100-80g", "a100-40g")):
            return f"; the module holds {what}, which only that platform compiles: give {option}"
    return ""


def analyze_text(name: str, text: str, settings: Settings, where: str, devices: list | None = None,
                 with_reports: bool = True, donated_inputs: frozenset[int] | None = None,
                 optimize_machine_code: bool = True, with_rules: bool = True, meets: ConflictCheck | None = None,
                 runs: bool = False):
    """Compile StableHLO text on the run's devices and run the lint pipeline on it. Without
    ``with_reports`` XLA writes no dump (no buffer assignment or live ranges: the report keeps XLA's
    peak and the collectives, which is what a fix check compares); without ``optimize_machine_code``
    a CPU target's machine code is not optimized (the same figures; compile_stablehlo_text).
    ``donated_inputs``: what the user donated, where known beside the module (a snapshot's metadata).
    Without ``with_rules``: the measure alone, no findings (``analyze_target``). ``meets``: whether another
    argument's sharding takes part in a finding's collectives (conflict_checks.py), as lint checks it.
    ``runs``: the caller runs the executable returned (rewrite), so it is compiled, never read from the compile
    memo (compile_memo.py), which keeps no executable."""
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, LINT)
    from .device_selection import platform_label

    isolation.phase(where, "compiling the module with XLA")
    try:
        program = compile_memo.compile_stablehlo_text(
            text, sig.num_partitions, sig.mesh.axes, settings, sig.mesh.device_ids, with_reports=with_reports,
            devices=devices, optimize_machine_code=optimize_machine_code, runs=runs)
    except Exception as e:
        raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}"
                                  f"{kernel_platform_hint(str(e), settings.platform)}") from e
    # Input shardings stay the module's own: checked-in StableHLO states them.
    facts = program_facts(program, platform_label(settings), [len(o.shape) for o in sig.outputs], None)
    if donated_inputs is not None:
        facts = dataclasses.replace(facts, donated_inputs=donated_inputs)
    # A finding's "why" hops come from propagating over a copy of the module (in a context of its own), as
    # lint's do: a snapshot's StableHLO keeps the locations they name, so check prints the same finding.
    explain_with = jax_adapter.parse_stablehlo(text) if with_rules else None
    report = analyze_target(name, module, facts, settings.pass_config, with_rules=with_rules,
                            explain_with=explain_with, display=display_source, meets=meets)
    return report, program, module


def _beside_path(hlo_path: str, report: str) -> str:
    """Where XLA's report for the same module is: ``...after_optimizations-<report>.txt``
    next to a dump, or ``NAME.<report>.txt`` next to ``NAME.hlo``."""
    if HLO_SUFFIX.search(hlo_path):
        return HLO_SUFFIX.sub(f"after_optimizations-{report}.txt", hlo_path)
    return os.path.splitext(hlo_path)[0] + f".{report}.txt"


def _beside(hlo_path: str, report: str) -> str | None:
    candidate = _beside_path(hlo_path, report)
    return read_input_text(candidate) if os.path.lexists(candidate) else None


def analyze_hlo_file(path: str, settings: Settings, name: str | None = None) -> TargetReport:
    from ...passes.models.errors import HloParseError, MalformedReport

    text = read_input_text(path)
    buffers = _beside(path, "buffer-assignment")
    try:
        report = analyze_hlo_only(
            name or dump_module_name(path), text, platform="as dumped (compiled HLO)",
            buffer_assignment_text=buffers, live_range_text=_beside(path, "live-range"),
            config=settings.pass_config,
        )
        if buffers and ":T(" in text.split("\n", 1)[0]:  # TPU layouts are tiled: f32[512,4096]{1,0:T(8,128)}
            report = report.model_copy(update={"warnings": [*report.warnings, NOT_LISTED]})
        return report
    except HloParseError as e:
        raise ShardLintInputError(path, f"not compiled HLO text: {e}") from None
    except MalformedReport as e:
        raise ShardLintInputError(_beside_path(path, "buffer-assignment"), str(e)) from None
