"""``run --processes``: the runs side by side in the terminal, and what grew with the process count."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.process_runs import MultiProcessReport
from ..common.terminal_safe import shown


def process_runs_view(report: MultiProcessReport) -> Group:
    table = Table(title="the script as N processes (per process: the largest of its processes)", title_justify="left")
    for name in ("processes", "devices each", "exit", "seconds", "programs", "collectives / device",
                 "peak host", "peak device"):
        table.add_column(name, justify="right")
    for run in report.process_runs:
        per = run.per_process
        device_peaks = [p.peak_device_bytes for p in per if p.peak_device_bytes is not None]
        table.add_row(
            str(run.processes), str(run.devices_per_process),
            "timeout" if run.timed_out else str(run.exit_code), f"{run.wall_seconds:.1f}",
            str(max((p.programs_compiled for p in per), default=0)),
            format_bytes(max((p.collective_bytes for p in per), default=0)),
            format_bytes(max((p.peak_host_bytes for p in per), default=0)),
            format_bytes(max(device_peaks)) if device_peaks else "-",
        )
    lines: list[Table | Text] = [table]
    for g in report.growing:
        where = f"{g.source.file}:{g.source.line}" if g.source else "(no user line)"
        sizes = ", ".join(f"{n}: {format_bytes(b) if b else 'none'}" for n, b in g.bytes_by_processes)
        lines.append(shown(f"grows with the process count: {g.program} ({g.kind}) at {where}: {sizes}",
                          style="yellow"))
    if not report.growing:
        lines.append(Text("nothing compiled moves more per process with more processes", style="green"))
    return Group(*lines)
