"""The models of ``run --processes N``: the script run as 1, 2, 4, ... N local JAX processes, what
each process compiled, moved and held, and what grows with the process count."""

from __future__ import annotations

from pydantic import Field

from .report import LintReport, Model, SourceLocation


class ProcessFigures(Model):
    """One process of one run."""

    process: int
    exit_code: int
    programs_compiled: int
    programs: list[str] = Field(description="The names of the programs it compiled, in order.")
    collective_bytes: int = Field(description="Per device: the result bytes of every collective of every "
                                  "program it compiled, once each (XLA's compiled HLO).")
    peak_host_bytes: int = Field(description="The process's peak resident memory (the kernel's ru_maxrss).")
    peak_device_bytes: int | None = Field(description="The largest per-device peak of its programs (XLA's buffer "
                                          "assignment); on CPU devices this memory is host memory too.")


class ProcessCountRun(Model):
    """The script run once as ``processes`` processes."""

    processes: int
    devices_per_process: int
    exit_code: int = Field(description="The first non-zero exit of its processes, else 0.")
    error: str | None
    timed_out: bool = False
    wall_seconds: float = Field(description="From the first start to the last exit (a measured time, not "
                                "deterministic).")
    per_process: list[ProcessFigures]


class GrowingTransfer(Model):
    """A program compiled at the user's line whose collectives move more per process as processes are added."""

    source: SourceLocation | None
    program: str
    kind: str = Field(description="The collectives' kinds, e.g. all-gather.")
    bytes_by_processes: list[tuple[int, int]] = Field(
        description="(process count, per-device collective bytes of the program in process 0); 0: not compiled.")


class MultiProcessReport(LintReport):
    """``run --processes N``: the lint report of the largest run, and every run side by side."""

    process_runs: list[ProcessCountRun]
    growing: list[GrowingTransfer] = Field(default_factory=list)
