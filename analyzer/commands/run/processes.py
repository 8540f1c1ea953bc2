"""``jax-shard-lint run --processes N``: the unmodified script run as 1, 2, 4, ... N local JAX processes
on CPU, side by side, and what grows with the process count found at the user's line.

Each process runs analyzer/adapter/local_cluster_boot.py first: ``jax.distributed.initialize()`` joins
a coordinator on 127.0.0.1 (the script's own call, or the boot's when the script makes none), with
JAX's CPU collectives over Gloo (``jax_cpu_collectives_implementation``), on its share of the virtual
devices. Every process dumps what it compiles to its own folder; the processes of a run share one
process group, killed whole at the timeout or when the run ends (no orphans).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass

from ....passes.models.process_runs import GrowingTransfer, MultiProcessReport, ProcessCountRun, ProcessFigures
from ....passes.models.report import Finding, ScriptRun, SourceLocation, TargetReport
from ....passes.pipelines.rule_stage import report_rules
from ....passes.pipelines.run_wide import failed_fetch_findings, growing_transfer_findings
from ... import __version__
from ...adapter import jax_adapter
from ...context.config import Settings
from ...context.display_paths import relativize
from ...context.program_files import apply_run_suppressions, program_analysis, program_files, shown_notes
from ...errors import ShardLintInputError
from ...supervision import isolation
from .command import RunRequest, child_env, dumped_programs, dumped_reports, last_error_line, only_pattern
from .process_counts import process_counts

_ANALYZER = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # analyzer/commands/run/
_BOOT = os.path.join(_ANALYZER, "adapter", "local_cluster_boot.py")
# After one process fails, the others get this long to fail too (a peer gone, a collective that cannot
# finish) before the group is killed: JAX's own heartbeat timeout is 100 s. On a loaded machine a peer
# can take many seconds to reach its own error.
_PEERS_GRACE_S = 30.0
# The program multihost_utils.process_allgather compiles: device_put's cross-process check of a host value.
_ALLGATHER_PROGRAM = "_identity_fn"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)', re.M)
# JAX's error for fetching a global array to one process (np.asarray, float(), printing it).
_NON_ADDRESSABLE = "spans non-addressable"


def _users(reports: list[TargetReport]) -> list[TargetReport]:
    """The reports with no target findings on JAX's own programs: device_put's cross-process check
    compiles an identity whose traffic is the user's device_put, reported (measured, at the user's line)
    as SL401; its own SL101/SL201 would name an argument and out_shardings the user never wrote."""
    return [r.model_copy(update={"findings": [], "suggested_out_shardings": None})
            if _ALLGATHER_PROGRAM in r.name else r for r in reports]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class _Process:
    index: int
    proc: subprocess.Popen
    stderr: object
    code: int | None = None
    peak_host_bytes: int = 0


def _run_group(request: RunRequest, dump: str, count: int, devices: int,
               initialize: bool) -> tuple[list[_Process], bool, float]:
    """``count`` processes of the script; they end together: the timeout, or a failure and its grace."""
    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    deadline = started + request.timeout_s if request.timeout_s else None
    processes: list[_Process] = []
    pgid = 0
    try:
        for index in range(count):
            env = child_env(os.path.join(dump, f"p{index}"), devices)
            env.update(JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
                       JAX_SHARD_LINT_COORDINATOR=address, JAX_SHARD_LINT_NUM_PROCESSES=str(count),
                       JAX_SHARD_LINT_PROCESS_ID=str(index), JAX_SHARD_LINT_INITIALIZE="1" if initialize else "0")
            err = tempfile.TemporaryFile()
            proc = subprocess.Popen([sys.executable, "-P", _BOOT, request.script, *request.args], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    process_group=pgid)
            if index == 0:
                pgid = proc.pid
                isolation.process_group(pgid)
            processes.append(_Process(index, proc, err))
        timed_out, failed_at = False, None
        while any(p.code is None for p in processes):
            for p in processes:
                if p.code is None:
                    pid, status, usage = os.wait4(p.proc.pid, os.WNOHANG)
                    if pid:
                        p.code = os.waitstatus_to_exitcode(status)
                        p.proc.returncode = p.code
                        p.peak_host_bytes = usage.ru_maxrss * 1024  # Linux: KiB
                        if p.code and failed_at is None:
                            failed_at = time.monotonic()
            now = time.monotonic()
            if deadline is not None and now > deadline:
                timed_out = True
                break
            if failed_at is not None and now > failed_at + _PEERS_GRACE_S:
                break
            time.sleep(0.05)
    finally:
        if pgid:
            try:
                os.killpg(pgid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        for p in processes:
            if p.code is None:
                p.proc.wait()
                p.code = -9
    return processes, timed_out, time.monotonic() - started


def _figures(p: _Process, programs: list[tuple[str, str, str | None]], reports: list[TargetReport]) -> ProcessFigures:
    peaks = [r.memory.peak_bytes for r in reports if r.memory is not None]
    return ProcessFigures(
        process=p.index, exit_code=p.code or 0, programs_compiled=len(programs), programs=[n for n, _, _ in programs],
        collective_bytes=sum(_moved(r) for r in reports),
        peak_host_bytes=p.peak_host_bytes, peak_device_bytes=max(peaks) if peaks else None)


def _error(processes: list[_Process], files: tuple[str, ...]) -> tuple[int, str | None, SourceLocation | None]:
    """The first failed process's exit, its error line, and the innermost line of the program's own
    files in its traceback."""
    # A process that exited by itself first: a peer the group's kill stopped has no error of its own.
    for p in sorted(processes, key=lambda p: (not (p.code or 0) > 0, p.index)):
        if p.code:
            p.stderr.seek(0)  # type: ignore[attr-defined]
            text = p.stderr.read().decode("utf-8", errors="replace")  # type: ignore[attr-defined]
            ours = [(f, int(line)) for f, line in _FRAME.findall(text) if os.path.abspath(f) in files]
            where = SourceLocation(file=ours[-1][0], line=ours[-1][1]) if ours else None
            return p.code, f"process {p.index}: {last_error_line(text) or f'exit {p.code}'}", where
    return 0, None, None


def _fetch_findings(runs: list[ProcessCountRun], failed_at: dict[int, SourceLocation], settings: Settings
                    ) -> list[Finding]:
    """A script that runs as one process and fails as several because it fetched an array spanning other
    processes' devices (np.asarray, float(), print of a global jax.Array): SL402 at the user's line (the run-wide
    pipeline's process rules build it, and leave it out where it is disabled)."""
    if not runs or runs[0].exit_code:
        return []
    for run in runs[1:]:
        where = failed_at.get(run.processes)
        if run.error and _NON_ADDRESSABLE in run.error and where is not None:
            return failed_fetch_findings(run.processes, run.error, where, settings.severities, settings.ignore)
    return []


def _moved(report: TargetReport) -> int:
    """Per device, every collective of the program once per compilation."""
    return sum(c.bytes * c.count for c in report.collectives) * report.compilations


def _growing(sizes: dict[tuple[str, str], dict[int, int]], counts: list[int], sites: dict[tuple[str, str], TargetReport]
             ) -> list[GrowingTransfer]:
    out = []
    for key in sorted(sizes):
        series = [(n, sizes[key].get(n, 0)) for n in counts]
        moved = [b for _, b in series]
        if len(moved) > 1 and moved[-1] > moved[0] and all(a <= b for a, b in zip(moved, moved[1:])):
            report = sites[key]
            kinds = sorted({c.kind for c in report.collectives})
            out.append(GrowingTransfer(source=report.call_site, program=key[1], kind=", ".join(kinds),
                                       bytes_by_processes=series))
    return out


def _same_place(a: Finding, b: Finding) -> bool:
    return a.rule == b.rule and a.source is not None and b.source is not None and a.source.line == b.source.line \
        and os.path.abspath(a.source.file) == os.path.abspath(b.source.file)


def run_processes(request: RunRequest, processes: int, settings: Settings) -> MultiProcessReport:
    if not os.path.isfile(request.script):
        raise ShardLintInputError(request.script, "no such file")
    if processes < 1:
        raise ShardLintInputError("--processes", f"expected a positive count, got {processes}")
    only = only_pattern(request)
    counts = process_counts(processes)
    total = request.devices or processes
    for n in counts:
        if total % n:
            raise ShardLintInputError("--devices", f"{total} devices cannot be shared evenly by {n} processes "
                                      f"(run --processes {processes} runs {', '.join(map(str, counts))})")
    program = program_files(request.script, settings)
    analysis = program_analysis(program, settings)
    runs: list[ProcessCountRun] = []
    sizes: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    sites: dict[tuple[str, str], TargetReport] = {}
    targets: list[TargetReport] = []
    skipped: list[str] = []
    compiled = 0
    failed_at: dict[int, SourceLocation] = {}
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="jax-shard-lint-run-") as dump:
            isolation.phase(request.script, f"running the script as {n} processes")
            group, timed_out, wall = _run_group(request, dump, n, total // n, analysis.initialize_file is None)
            figures = []
            for p in group:
                programs = dumped_programs(os.path.join(dump, f"p{p.index}"))
                reports, left_out = dumped_reports(programs, only, settings, request)
                figures.append(_figures(p, programs, reports))
                if p.index == 0:
                    for r in reports:
                        key = (str(r.call_site), r.name.split("#")[0])
                        sizes[key][n] += _moved(r)
                        sites.setdefault(key, r)
                    if n == counts[-1]:
                        targets, skipped, compiled = _users(reports), left_out, len(programs)
            code, error, where = _error(group, program.files)
            if where is not None:
                failed_at[n] = where
            for p in group:
                p.stderr.close()  # type: ignore[attr-defined]
        runs.append(ProcessCountRun(processes=n, devices_per_process=total // n, exit_code=code, error=error,
                                    timed_out=timed_out, wall_seconds=round(wall, 2), per_process=figures))
    growing = _growing(sizes, counts, sites)
    measured = growing_transfer_findings(growing, lambda program: program.endswith(_ALLGATHER_PROGRAM),
                                         settings.severities, settings.ignore)
    measured += _fetch_findings(runs, failed_at, settings)
    static = [f for f in analysis.findings if not any(_same_place(f, m) for m in measured)]
    targets, run_findings = apply_run_suppressions(targets, list(program.files), settings, report_unused=False,
                                                   extra=static + measured)
    last = runs[-1]
    jax_version, jaxlib_version = jax_adapter.versions()
    report = MultiProcessReport(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version, command="run",
        script=request.script, targets=targets, findings=run_findings,
        rules=report_rules(settings.ignore, settings.severities), source_notes=shown_notes(analysis.notes, program),
        run=ScriptRun(exit_code=last.exit_code if not any(r.exit_code for r in runs) else
                      next(r.exit_code for r in runs if r.exit_code),
                      error=next((f"{r.processes} processes: {r.error}" for r in runs if r.error), None),
                      timed_out=any(r.timed_out for r in runs), programs_compiled=compiled,
                      programs_reported=len(targets), skipped=skipped),
        process_runs=runs, growing=growing,
    )
    return relativize(report, os.getcwd())
