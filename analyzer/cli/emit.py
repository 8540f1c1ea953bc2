"""The one way a command's report leaves: --format picks the renderer (reports/registry.py
says which one each command has), -o the destination."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import IO, Any

from ...reports.registry import TERMINAL, renderer


def progress_printer(args) -> Callable[[str], None] | None:
    """Progress lines for people watching a terminal (stderr); logs and pipes get the report alone."""
    if args.quiet or not sys.stderr.isatty():
        return None
    from ..supervision.terminal_size import console_for

    console = console_for(sys.stderr)
    return lambda msg: console.print(f"[dim]{msg}...[/dim]")


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
