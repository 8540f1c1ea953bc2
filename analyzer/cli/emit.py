"""The one way a command's report leaves: --format picks the renderer (reports/registry.py
says which one each command has), -o the destination."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from ...reports.registry import TERMINAL, renderer

# A phase without a counter is named in a log (stderr not a terminal) once it has run this long: a
# short one, or an input refused at once, leaves no line there (the refusal stays the one line).
# JAX_SHARD_LINT_PHASE_NOTICE_S sets it (the tests: long, so a loaded machine adds no line to theirs).
PHASE_NOTICE_S = 3.0


def progress_printer(args) -> Callable[[str], None] | None:
    """Progress lines on stderr, each with the seconds since the command began; ``-q``: none.

    A terminal gets every phase, dimmed. A log or a pipe (CI) gets plain lines, never rewritten in
    place: the counted steps of the phases that take long ("[2/5] ...": fix checks, fit's probes,
    suggest's and sweep's compiles) at once, and any other phase (lint's compile of a target, suggest's
    solve) once it has run PHASE_NOTICE_S seconds; an input refused before then is still the one line a failing
    command writes."""
    if args.quiet:
        return None
    made = getattr(args, "progress_printer", None)  # one clock per command, however often it is asked for
    if made is None:
        made = args.progress_printer = _printer(time.monotonic())
    return made


def stop_progress(args) -> None:
    """The command is over: a phase line still waiting for its time is not printed."""
    made = getattr(args, "progress_printer", None)
    if isinstance(made, _LogLines):
        made.stop()


class _LogLines:
    """Progress as plain lines for a log: counted steps at once, a phase once it has run a while."""

    def __init__(self, started: float):
        self.started = started
        self.after = float(os.environ.get("JAX_SHARD_LINT_PHASE_NOTICE_S", PHASE_NOTICE_S))
        self.lock = threading.Lock()
        self.waiting: threading.Timer | None = None

    def _print(self, msg: str) -> None:
        print(f"jax-shard-lint: {msg} ({time.monotonic() - self.started:.1f} s)", file=sys.stderr, flush=True)

    def stop(self) -> None:
        with self.lock:
            if self.waiting is not None:
                self.waiting.cancel()
                self.waiting = None

    def __call__(self, msg: str) -> None:
        self.stop()
        if msg.startswith("["):
            self._print(msg)
            return
        timer = threading.Timer(self.after, self._notice, args=(msg,))
        timer.daemon = True
        with self.lock:
            self.waiting = timer
        timer.start()

    def _notice(self, msg: str) -> None:
        with self.lock:
            if self.waiting is None or self.waiting is not threading.current_thread():
                return  # a later phase began, or the command ended, while this one waited
            self.waiting = None
            self._print(msg)


def _printer(started: float) -> Callable[[str], None]:
    if not sys.stderr.isatty():
        return _LogLines(started)
    from rich.markup import escape

    from ..supervision.terminal_size import console_for

    console = console_for(sys.stderr)
    return lambda msg: console.print(f"[dim]{escape(msg)}... ({time.monotonic() - started:.1f} s)[/dim]")


def emit_report(args, command: str, report, **terminal_extra: Any) -> None:
    """Render ``report`` as ``command``'s ``--format`` and write it to ``-o`` or stdout.
    A text format is rendered before ``-o`` is opened (a renderer's failure leaves no
    half-written file); a terminal report written to a file is drawn without colour,
    at the width of a pipe."""
    render = renderer(command, args.format)
    draw: Callable[[IO[str], bool], object]
    if args.format == TERMINAL:
        from ..supervision.terminal_size import console_for

        def draw(stream: IO[str], to_file: bool) -> object:
            return render(report, console_for(stream, to_file=to_file), **terminal_extra)
    else:
        text = render(report)

        def draw(stream: IO[str], to_file: bool) -> object:
            return stream.write(text)
    if args.output:
        from ..inputs.files import open_output

        # Drawn before the file is opened; rich pads every line to the width: a file keeps the text alone.
        buffer = io.StringIO()
        draw(buffer, True)
        drawn = buffer.getvalue()
        if args.format == TERMINAL:
            drawn = "".join(line.rstrip() + "\n" for line in drawn.splitlines())
        with open_output(args.output) as f:
            f.write(drawn)
        if not args.quiet:  # one line, on stderr: stdout stays empty for whoever pipes it
            print(f"wrote {args.format} report to {args.output}", file=sys.stderr)
    else:
        draw(sys.stdout, False)
