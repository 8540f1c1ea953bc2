"""``check``'s walk over checked-in programs: a StableHLO snapshot or export compiled on the run's
devices (with lint's conflict check where fixes are checked), compiled HLO text, and dump folders. It
sits above checked_in_analysis.py because the conflict check compiles through fix_checks, which
analyses its candidates there.
"""
from __future__ import annotations

import os

from ...passes.models.report import TargetReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.lint import LINT
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..inputs.checked_in import (
    dump_directory_modules,
    dump_module_name,
    kind_of,
    numbered_module_name,
    read_export,
    read_mlir,
    snapshot_donated_inputs,
    snapshot_platform,
)
from ..inputs.files import check_input_file
from ..inputs.limits import check_device_count
from ..supervision import isolation
from .cached_analysis import cached_text_report
from .checked_in_analysis import analyze_hlo_file, analyze_text
from .conflict_checks import conflict_check
from .jit_call_findings import at_jit_calls


def check_path(path: str, settings: Settings, devices: list | None = None) -> list[TargetReport]:
    """Analyse one checked-in program (or every module of a dump directory) on
    the run's devices."""
    kind = kind_of(path)
    if kind != "dump":
        check_input_file(path)
    isolation.phase(path, "reading it")
    if kind == "dump":
        files = dump_directory_modules(path)
        names = [dump_module_name(f) for f in files]
        # A function compiled twice (module_0000.jit_f, module_0038.jit_f) is two
        # programs: each keeps the dump's own module number in its name.
        return [analyze_hlo_file(f, settings, name if names.count(name) == 1 else numbered_module_name(f))
                for f, name in zip(files, names)]
    if kind == "hlo":
        return [analyze_hlo_file(path, settings)]
    if kind == "mlir":
        module, text = read_mlir(path)
        name = os.path.splitext(os.path.basename(path))[0]
        n = entry_signature(module, LINT).num_partitions
    else:
        text, n = read_export(path)
        name = os.path.splitext(os.path.basename(path))[0]
    check_device_count(path, n)
    pool = devices if devices is not None else jax_adapter.cpu_devices()
    if n > len(pool):
        raise ShardLintInputError(path, f"needs {n} devices; run with --devices {n} or more")
    donated = snapshot_donated_inputs(path) if kind == "mlir" else None
    # The recorded donation is part of what is analysed: it keys the cache with the text.
    keyed = text if donated is None else f"{text}\n// donated_inputs {sorted(donated)}"
    # With the fixes checked, a why chain from another argument is checked as lint checks it (a compile per such
    # argument, no Python run): check prints the other side of a conflict where lint does.
    meets = conflict_check(text, settings, path, pool[:n]) if settings.check_fixes else None
    report = cached_text_report(name, keyed, n, settings, pool,
                                lambda: analyze_text(name, text, settings, path, devices=pool, donated_inputs=donated,
                                                     optimize_machine_code=False, meets=meets)[0],
                                conflict_checked=meets is not None)
    taken_on = snapshot_platform(path) if kind == "mlir" else None
    if taken_on and not taken_on.startswith("cpu") and settings.platform == "cpu":
        report = report.model_copy(update={"warnings": [
            f"this snapshot was taken on {taken_on} but these figures come from a CPU compile; "
            f"use --platform {taken_on.split()[0]}"]})
    # The jit-option findings on the jax.jit line where the script (read, not run) shows it, as lint places them.
    return [at_jit_calls(report)]
