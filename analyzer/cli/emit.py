"""The one way a command's report leaves: --format picks the renderer, -o the destination."""

from __future__ import annotations

import sys

from ..errors import ShardLintInputError


def console_for_args(args, stream=None):
    from ..supervision.terminal_size import console_for

    return console_for(stream or sys.stdout)


def _emit(text: str, output: str | None) -> None:
    if output:
        from ..inputs.files import open_output

        with open_output(output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def emit_report(args, report, text_renderers: dict, terminal) -> None:
    """The one way a command's report leaves: ``--format`` picks the renderer,
    ``-o`` the destination (a terminal report written to a file is rendered
    without colour, at the width of a pipe)."""
    if args.format == "terminal":
        from ..supervision.terminal_size import console_for

        if args.output:
            from ..inputs.files import open_output

            with open_output(args.output) as f:
                terminal(report, console_for(f, to_file=True))
        else:
            terminal(report, console_for(sys.stdout))
        return
    render = text_renderers.get(args.format)
    if render is None:  # the parser offers only what the command renders; SARIF carries findings alone
        raise ShardLintInputError(f"--format {args.format}", "SARIF carries findings: use it with lint or check")
    _emit(render(report), args.output)


def _lint_renderers() -> dict:
    from ...reports.html import render_html
    from ...reports.json_report import render_json
    from ...reports.markdown import render_lint_markdown
    from ...reports.sarif import render_sarif

    return {"json": render_json, "html": render_html, "sarif": render_sarif, "markdown": render_lint_markdown}


def emit_lint(args, report) -> None:
    from ...reports.terminal import render_terminal

    emit_report(args, report, _lint_renderers(), render_terminal)


def emit_run(args, run, html, markdown, terminal) -> None:
    """The output of a command whose report has no findings to put in SARIF."""
    from ...reports.json_report import render_json

    emit_report(args, run, {"json": render_json, "html": html, "markdown": markdown}, terminal)
