"""``jax-shard-lint run``: run an unmodified script as ``__main__`` and lint every
program it compiles.

The script runs in a child process, on whatever devices it finds, with JAX's and
XLA's own dump options pointed at a temporary directory (``JAX_DUMP_IR_TO`` for
the StableHLO of each program, ``--xla_dump_to`` for the compiled HLO and its
buffer-assignment and live-range reports). Nothing in JAX is patched. Whatever
was compiled before the script exited, cleanly or not, is reported.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, replace

from ....passes.models.memory_stats import MemoryStats
from ....passes.models.report import LintReport, ScriptRun, TargetReport
from ....passes.pipelines.check import analyze_hlo_only
from ....passes.pipelines.inputs import CompiledFacts
from ....passes.pipelines.lint import analyze_target, program_call_site, replicated_outputs
from ....passes.pipelines.rule_stage import report_rules
from ....passes.pipelines.xla_reports import stats_from_buffer_assignment
from ... import __version__
from ...adapter import jax_adapter
from ...backend.checked_fixes import checked_fixes
from ...backend.run_target import resolve_run_target
from ...backend.side_by_side import one_compile_per_program
from ...backend.tpu_dump_memory import NOT_LISTED, dump_memory
from ...context.config import Settings
from ...context.display_paths import relativize
from ...context.program_files import apply_run_suppressions, program_files, program_findings
from ...errors import ShardLintInputError
from ...inputs.files import read_text_if_present as _read
from ...supervision import isolation

_XLA_MODULE = re.compile(r"module_(\d+)\.(.+?)\.[\w.]*?after_optimizations\.txt$")
_JAX_MODULE = re.compile(r"jax_ir(\d+)_(.+)_compile\.mlir$")


@dataclass(frozen=True)
class RunRequest:
    script: str
    args: tuple[str, ...] = ()
    max_programs: int = 50
    only: str | None = None
    include_single_device: bool = False
    devices: int | None = None
    timeout_s: float | None = None
    from_dump: bool = False  # TPU memory from the dump alone, without compiling its reproducer again


def child_env(dump: str, devices: int | None) -> dict:
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").split()
    flags = [f for f in flags if not f.startswith("--xla_dump_to")]
    if devices:
        flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_dump_to={os.path.join(dump, 'xla')}"])
    env["JAX_DUMP_IR_TO"] = os.path.join(dump, "jax")
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # a cache hit writes no dumps
    if "libtpu" in sys.modules:
        # This process holds libtpu's machine-wide lock (it compiled for a TPU target): the script's own
        # compile-only TPU devices would fail on our lock, not on a TPU another job uses.
        env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return env


def last_error_line(stderr: str) -> str | None:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", ln)]
    return (errors or lines or [None])[-1]



def dumped_programs(dump: str) -> list[tuple[str, str, str | None]]:
    """(name, compiled HLO path, StableHLO path or None), in compile order."""
    stablehlo: dict[str, list[str]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(dump, "jax", "*.mlir"))):
        m = _JAX_MODULE.search(os.path.basename(path))
        if m:
            stablehlo[m.group(2)].append(path)
    out = []
    seen: dict[str, int] = defaultdict(int)
    for path in sorted(glob.glob(os.path.join(dump, "xla", "*after_optimizations.txt")),
                       key=lambda p: int(_XLA_MODULE.search(os.path.basename(p)).group(1))
                       if _XLA_MODULE.search(os.path.basename(p)) else 0):
        m = _XLA_MODULE.search(os.path.basename(path))
        if not m:
            continue
        name = m.group(2)
        k = seen[name]
        seen[name] += 1
        candidates = stablehlo.get(name, [])
        out.append((name, path, candidates[k] if k < len(candidates) else None))
    return out


# libtpu's names for the chips, in a TPU dump's target_arguments.txt: (version, variant) -> our --platform.
_TPU_VERSIONS = {("PUFFERFISH", ""): "tpu-v4", ("VIPERFISH", "lite"): "tpu-v5e", ("VIPERFISH", ""): "tpu-v5p",
                 ("GHOSTLITE", ""): "tpu-v6e", ("GHOSTLITE", "lite"): "tpu-v6e"}
_TPU_TOPOLOGY = re.compile(r'tpu_topology_args\s*\{\s*version:\s*TPU_VERSION_(\w+)(?:\s*variant:\s*"(\w*)")?')


def header_line(hlo_text: str) -> str:
    """The ``HloModule`` line, whole: its ``entry_computation_layout`` alone can run to thousands of
    characters before ``num_partitions`` (a MaxText step's is at character 5,724)."""
    return hlo_text.split("\n", 1)[0]


def _partitions(hlo_text: str | None) -> int:
    m = re.search(r"\bnum_partitions=(\d+)", header_line(hlo_text or ""))
    return int(m.group(1)) if m else 1


def dumped_platform(hlo_path: str, hlo_text: str) -> str:
    """What the dumped program was compiled for: a TPU generation (its dump names the chip), ``tpu`` when
    it does not, ``gpu`` or ``cpu``. A script may compile for compile-only TPU devices (MaxText's
    train_compile) whatever it runs on."""
    base = hlo_path[: -len("after_optimizations.txt")]
    arguments = _read(base + "target_arguments.txt") or ""
    m = _TPU_TOPOLOGY.search(arguments)
    if m:
        return _TPU_VERSIONS.get((m.group(1), m.group(2) or ""), "tpu")
    if ":T(" in header_line(hlo_text):  # TPU layouts are tiled: f32[512,4096]{1,0:T(8,128)}
        return "tpu"
    return "gpu" if "gpu_after" in os.path.basename(hlo_path) else "cpu"


def _analyze(name: str, hlo_path: str, mlir_path: str | None, settings: Settings,
             request: RunRequest) -> TargetReport:
    hlo_text = _read(hlo_path)
    base = hlo_path[: -len("after_optimizations.txt")]
    buffers = _read(base + "after_optimizations-buffer-assignment.txt")
    live = _read(base + "after_optimizations-live-range.txt")
    compiled_for = dumped_platform(hlo_path, hlo_text or "")
    platform = f"as run ({compiled_for})"
    if compiled_for.startswith("tpu") and settings.platform != compiled_for:
        # The step time and the budget are the chip's the program was compiled for, not the host's.
        settings = as_run(replace(
            settings, platform=compiled_for, target=None,
            budget_bytes=None if settings.budget_source == settings.platform else settings.budget_bytes))
    memory, warnings = _memory(hlo_path, hlo_text or "", compiled_for, buffers, request, settings)
    config = settings.pass_config
    report = None
    if mlir_path:
        try:
            module = jax_adapter.parse_stablehlo(_read(mlir_path))
            facts = CompiledFacts(
                hlo_text=hlo_text, platform=platform, memory=memory,
                live_range_text=live, buffer_assignment_text=buffers,
                output_shardings=replicated_outputs(module, hlo_text or ""),
            )
            report = analyze_target(name, module, facts, config)
            call_site = program_call_site(module, name, settings.pass_config.ownership)
            report = report.model_copy(update={"call_site": call_site})
        except Exception:  # a StableHLO dump this JAX cannot parse back: the HLO still tells most
            report = None
    if report is None:
        report = analyze_hlo_only(name, hlo_text, platform, config, buffers, live, memory)
    return report.model_copy(update={"warnings": report.warnings + warnings}) if warnings else report


def _memory(hlo_path: str, hlo_text: str, compiled_for: str, buffers: str | None,
            request: RunRequest, settings: Settings) -> tuple[MemoryStats | None, list[str]]:
    """The buffer assignment's figures; for a TPU program, memory_analysis() of its reproducer compiled
    again (the dump leaves out the compiler's scratch area), unless --from-dump."""
    if not buffers:
        return None, []
    if not compiled_for.startswith("tpu"):
        return stats_from_buffer_assignment(buffers), []
    if request.from_dump:
        return stats_from_buffer_assignment(buffers), [NOT_LISTED]
    if settings.target is None:
        raise RuntimeError("a dumped program's memory asked before its target was resolved (as_run)")
    found = dump_memory(hlo_path, settings.target, _partitions(hlo_text), buffers)
    return found.stats, [found.warning] if found.warning else []


def _run_script(request: RunRequest, dump: str) -> tuple[int, str | None, bool]:
    """The script in its own process group: at the timeout the group goes, the
    processes the script started with it."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, request.script, *request.args], env=child_env(dump, request.devices),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, process_group=0)
        isolation.process_group(proc.pid)
        try:
            code = proc.wait(timeout=request.timeout_s)
            err.seek(0)
            stderr = err.read().decode("utf-8", errors="replace")
            error, timed_out = (last_error_line(stderr) if code else None), False
        except subprocess.TimeoutExpired:
            code, error, timed_out = -1, f"stopped after {request.timeout_s:g} s (--timeout)", True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    return code, error, timed_out


def only_pattern(request: RunRequest) -> re.Pattern | None:
    if not request.only:
        return None
    try:
        return re.compile(request.only)
    except re.error as e:
        raise ShardLintInputError("--only", f"not a regular expression: {e}") from None


def as_run(settings: Settings) -> Settings:
    """The settings with the target of programs the script compiled (run selects no devices), resolved by the
    front end (backend/run_target.py) once per platform: at the start, and for a TPU program a script
    compiled on another host, once more for the chip its dump names."""
    return resolve_run_target(settings, selection="program")[0]


def dumped_reports(programs: list[tuple[str, str, str | None]], only: re.Pattern | None, settings: Settings,
                   request: RunRequest, fix_checks: bool = False) -> tuple[list[TargetReport], list[str]]:
    """The dumped programs' reports (one per program and call site, recompilations counted), named
    uniquely, and the programs left out with why; with ``fix_checks`` (run's, not --processes' runs side by
    side), each program's fixes compiled."""
    jax_adapter.configure_devices(settings.platform, settings.devices)
    settings = as_run(settings)  # after the devices are configured: a GPU's kind is asked of JAX
    skipped, reports = [], []
    by_key: dict[tuple, TargetReport] = {}
    for name, hlo_path, mlir_path in programs:
        if only and not only.search(name):
            skipped.append(f"{name}: does not match --only")
            continue
        if not request.include_single_device and _partitions(_read(hlo_path)) < 2:
            skipped.append(f"{name}: runs on one device (--all includes it)")
            continue
        if len(reports) >= request.max_programs:
            skipped.append(f"{name}: past --max-programs {request.max_programs}")
            continue
        report = _analyze(name, hlo_path, mlir_path, settings, request)
        key = (name, str(report.call_site))
        if key in by_key and by_key[key].collectives == report.collectives:
            first = by_key[key]
            by_key[key] = first.model_copy(update={"compilations": first.compilations + 1})
            reports[reports.index(first)] = by_key[key]
            continue
        report = _with_checked_fixes(report, mlir_path, settings, request.script) if fix_checks else report
        by_key[key] = report
        reports.append(report)
    names: dict[str, int] = defaultdict(int)
    unique = []
    for r in reports:
        names[r.name] += 1
        unique.append(r if names[r.name] == 1 else r.model_copy(update={"name": f"{r.name}#{names[r.name]}"}))
    return unique, skipped


def _with_checked_fixes(report: TargetReport, mlir_path: str | None, settings: Settings, where: str
                        ) -> TargetReport:
    """The program's fixes compiled and measured as lint's are (its dumped StableHLO, on this process's CPU
    devices), so a fix run prints is checked too; a program without StableHLO, compiled for another
    platform, or on more devices than are here keeps its fixes unchecked."""
    text = _read(mlir_path) if mlir_path and settings.check_fixes and report.platform == "as run (cpu)" else None
    devices = jax_adapter.cpu_devices() if text else []
    if not text or not report.mesh or report.num_devices > len(devices):
        return report
    with one_compile_per_program():  # a program two checks arrive at is compiled once
        return checked_fixes(report, text, settings, where, devices[:report.num_devices])


def run(request: RunRequest, settings: Settings) -> LintReport:
    if not os.path.isfile(request.script):
        raise ShardLintInputError(request.script, "no such file")
    only = only_pattern(request)
    with tempfile.TemporaryDirectory(prefix="jax-shard-lint-run-") as dump:
        code, error, timed_out = _run_script(request, dump)
        programs = dumped_programs(dump)
        unique, skipped = dumped_reports(programs, only, settings, request, fix_checks=True)
    program = program_files(request.script, settings)
    from_source, source_notes = program_findings(program, settings)
    unique, run_findings = apply_run_suppressions(
        unique, list(program.files), settings, report_unused=False, extra=from_source,
    )
    jax_version, jaxlib_version = jax_adapter.versions()
    report = LintReport(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version, command="run",
        script=request.script, targets=unique, findings=run_findings,
        rules=report_rules(settings.ignore, settings.severities), source_notes=source_notes,
        run=ScriptRun(exit_code=code, error=error, timed_out=timed_out, programs_compiled=len(programs),
                      programs_reported=len(unique),
                      skipped=skipped),
    )
    return relativize(report, os.getcwd())
