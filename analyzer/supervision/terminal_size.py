"""The terminal a report is shown in: measured where it is known, used where it is not.

Every command runs in a supervised child whose descriptors 0-2 are ``/dev/null``
and a capture file (supervisor.py); its ``sys.stdout``/``sys.stderr`` are the
parent's streams, passed as other descriptors. rich measures the terminal on
descriptors 0-2, so in the child it would always find 80 columns. The parent
measures its own stdout and stderr instead and hands the sizes over in
``JAX_SHARD_LINT_TERMINAL``; in process (tests, ``JAX_SHARD_LINT_IN_PROCESS``)
the stream itself is measured.

Width: ``$COLUMNS`` when set (it always wins, as in rich), else the terminal's
width, else 100 for a pipe or a file. Colour: only on a terminal, never with
``$NO_COLOR``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import IO

TERMINAL_ENV = "JAX_SHARD_LINT_TERMINAL"
PIPED_WIDTH = 100  # a report in a log or a file: wider than 80, readable without wrapping
MIN_WIDTH = 60


@dataclass(frozen=True)
class StreamSize:
    """What the parent saw of one stream: a terminal or not, and its size."""

    tty: bool
    columns: int | None = None
    lines: int | None = None


@dataclass(frozen=True)
class TerminalSizes:
    stdout: StreamSize
    stderr: StreamSize

    def to_env(self) -> str:
        return json.dumps({"stdout": self.stdout.__dict__, "stderr": self.stderr.__dict__}, sort_keys=True)

    @staticmethod
    def from_env(text: str) -> TerminalSizes | None:
        try:
            raw = json.loads(text)
            return TerminalSizes(StreamSize(**raw["stdout"]), StreamSize(**raw["stderr"]))
        except (ValueError, KeyError, TypeError):
            return None


def _measure_fd(fd: int) -> StreamSize:
    try:
        if not os.isatty(fd):
            return StreamSize(tty=False)
        size = os.get_terminal_size(fd)
    except OSError:
        return StreamSize(tty=False)
    # A pseudo-terminal that was never sized reports 0 x 0.
    return StreamSize(tty=True, columns=size.columns or None, lines=size.lines or None)


def measure_terminal() -> TerminalSizes:
    """The parent's stdout and stderr, as a user's terminal shows them."""
    return TerminalSizes(_measure_fd(1), _measure_fd(2))


def stream_size(stream: IO[str]) -> StreamSize:
    """The size of the terminal ``stream`` writes to: the parent's measurement
    when the parent handed one over, else the stream's own."""
    handed = TerminalSizes.from_env(os.environ.get(TERMINAL_ENV, ""))
    if handed is not None and stream is sys.stdout:
        return handed.stdout
    if handed is not None and stream is sys.stderr:
        return handed.stderr
    try:
        return _measure_fd(stream.fileno())
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed stream
        return StreamSize(tty=False)


def _columns_env() -> int | None:
    try:
        return max(MIN_WIDTH, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return None


def console_for(stream: IO[str], *, to_file: bool = False):
    """A rich Console for ``stream``: a terminal's own width and colours, or a
    pipe's and a file's (``to_file``: ``-o``, never colours, never a terminal)."""
    from rich.console import Console

    size = StreamSize(tty=False) if to_file else stream_size(stream)
    width = _columns_env() or (size.columns if size.tty else None) or PIPED_WIDTH
    colour = size.tty and not os.environ.get("NO_COLOR")
    return Console(file=stream, width=width, height=size.lines or 25, no_color=not colour,
                   force_terminal=size.tty, highlight=False)
