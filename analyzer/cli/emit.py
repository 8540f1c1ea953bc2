"""The one way a command's report leaves: --format picks the renderer (reports/registry.py
says which one each command has), -o the destination."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ...reports.registry import TERMINAL, renderer


def progress_printer(args) -> Callable[[str], None] | None:
    """Progress lines for people watching a terminal (stderr); logs and pipes get the report alone."""
    if args.quiet or not sys.stderr.isatty():
        return None
    from ..supervision.terminal_size import console_for

    console = console_for(sys.stderr)
    return lambda msg: console.print(f"[dim]{msg}...[/dim]")


def _write(text: str, output: str | None) -> None:
    if output:
        from ..inputs.files import open_output

        with open_output(output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def emit_report(args, command: str, report, **terminal_extra: Any) -> None:
    """Render ``report`` as ``command``'s ``--format`` and write it to ``-o`` or stdout.
    A terminal report written to a file is drawn without colour, at the width of a pipe."""
    render = renderer(command, args.format)
    if args.format != TERMINAL:
        _write(render(report), args.output)
        return
    from ..supervision.terminal_size import console_for

    if args.output:
        from ..inputs.files import open_output

        with open_output(args.output) as f:
            render(report, console_for(f, to_file=True), **terminal_extra)
    else:
        render(report, console_for(sys.stdout), **terminal_extra)
