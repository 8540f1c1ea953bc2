"""The one way a command's report leaves: --format picks the renderer (reports/registry.py
says which one each command has), -o the destination."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from ...reports.registry import TERMINAL, renderer


def progress_printer(args) -> Callable[[str], None] | None:
    """Progress lines on stderr, each with the seconds since the command began; ``-q``: none.

    A terminal gets every phase, dimmed. A log or a pipe (CI) gets the counted steps of the
    phases that take long ("[2/5] ...": fix checks, fit's probes, suggest's and sweep's compiles)
    as plain lines, one per step and never rewritten in place; an input refused before the first
    counted step (a bad option, file or script) is still the one line a failing command writes."""
    if args.quiet:
        return None
    made = getattr(args, "progress_printer", None)  # one clock per command, however often it is asked for
    if made is None:
        made = args.progress_printer = _printer(time.monotonic())
    return made


def _printer(started: float) -> Callable[[str], None]:
    if not sys.stderr.isatty():
        def plain(msg: str) -> None:
            if msg.startswith("["):
                print(f"jax-shard-lint: {msg} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)

        return plain
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
