"""Small report models for the renderer tests (tests/reports/test_*_report.py), built by hand: the
renderers draw models only, so each test builds one, renders it and reads its figures, names and
escaping back. Nothing here compiles. A hostile string (HTML, rich markup) is in every name a
program or a user controls; each format must show it inert."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import tempfile

from rich.console import Console

from jax_shard_lint.passes.models.report import SourceLocation, StepTime
from jax_shard_lint.reports.registry import RENDERERS, renderer

HOSTILE = "<script>alert(1)</script>[bold]pwn[/bold]"
# The same text as each format must show it (written out here, not computed by the code under test).
HOSTILE_HTML = "&lt;script&gt;alert(1)&lt;/script&gt;[bold]pwn[/bold]"
HOSTILE_MARKDOWN = r"&lt;script&gt;alert(1)&lt;/script&gt;\[bold\]pwn\[/bold\]"

HEADER = {"tool_version": "9.9.9", "jax_version": "0.0.1", "jaxlib_version": "0.0.1", "script": "train.py"}
MiB = 1024**2


def at(line: int, file: str = "train.py") -> SourceLocation:
    return SourceLocation(file=file, line=line, function="step")


def step_time(seconds: float, device: str = "h100") -> StepTime:
    return StepTime(device=device, device_description=f"{device} (nominal figures)", basis="roofline", seconds=seconds,
                    serial_seconds=seconds * 1.5, compute_seconds=seconds / 2, flop_seconds=seconds / 3,
                    memory_seconds=seconds / 4, communication_seconds=seconds / 2, async_communication_seconds=0.0,
                    within_host_seconds=seconds / 2, across_hosts_seconds=0.0, flops=1e12, bytes_accessed=1e9,
                    sources=["vendor sheet"])


# Where each render is written down as "COMMAND FORMAT" (set by test_renderer_coverage.py, which runs the
# content tests and reads back the pairs they rendered).
RENDERED_LOG = "JAX_SHARD_LINT_RENDERED_LOG"


# Where each rendered model is kept (pickled with the format and the terminal's options), for
# test_renderer_coverage.py to find which of its fields each format shows.
RENDERED_MODELS = "JAX_SHARD_LINT_RENDERED_MODELS"


def _rendered(command: str, fmt: str, model=None, extra: dict | None = None) -> None:
    if log := os.environ.get(RENDERED_LOG):
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{command} {fmt}\n")
    if model is not None and (folder := os.environ.get(RENDERED_MODELS)):
        try:
            kept = pickle.dumps((command, fmt, model, extra or {}))
        except (pickle.PicklingError, AttributeError, TypeError):
            return  # a terminal option that is a function: the model is kept by the other renders
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".pkl", delete=False) as f:
            f.write(kept)


def render_cli(cli, command: str, fmt: str, *args: str):
    """What ``jax-shard-lint COMMAND --format FMT ARGS`` prints, for the formats the command line writes
    itself (``rules``): the cli fixture's result."""
    _rendered(command, fmt)
    return cli(command, "--format", fmt, *args)


def render_text(command: str, fmt: str, model) -> str:
    """A text format (html, json, sarif, markdown) as the command line writes it."""
    assert fmt in RENDERERS[command], f"{command} has no {fmt} renderer"
    _rendered(command, fmt, model)
    return renderer(command, fmt)(model)


def render_terminal(command: str, model, width: int = 250, **extra) -> str:
    """The terminal report, drawn without colour on a console wide enough that no name wraps."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True, force_terminal=False, highlight=False)
    _rendered(command, "terminal", model, {"width": width, **extra})
    renderer(command, "terminal")(model, console, **extra)
    return buffer.getvalue()


def assert_inert_html(page: str) -> None:
    """The page runs no script of the program's: the hostile text is there, as entities only."""
    assert HOSTILE_HTML in page
    assert "<script>alert" not in page


def assert_inert_markdown(text: str) -> None:
    assert HOSTILE_MARKDOWN in text
    assert "<script>" not in text and "[bold]" not in text


def assert_inert_terminal(text: str) -> None:
    """rich shows the name as written: not as markup (unescaped, ``[bold]pwn[/bold]`` would print as ``pwn``),
    nor with terminal_safe's escape showing (``\\[bold]``, where a name is drawn as rich Text)."""
    assert HOSTILE in text
    assert "\\[" not in text


# A name that tries to leave a Markdown code span or block and write raw HTML after it.
BREAKOUT = "x```\n</code><script>alert(1)</script>`y"


def fenced_blocks(text: str) -> list[str]:
    """The fenced code blocks in Markdown, read as CommonMark does: an opening fence of n >= 3 backticks
    (and an info string), closed only by a line of at least n backticks and nothing else."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        opening = re.match(r"(`{3,})[^`]*$", lines[i])
        if not opening:
            i += 1
            continue
        n, body, i = len(opening.group(1)), [], i + 1
        while i < len(lines) and not re.fullmatch(rf"`{{{n},}}\s*", lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append("\n".join(body))
        i += 1
    return blocks


def json_round_trip(command: str, model) -> dict:
    """JSON is the model itself: it reads back into an equal model."""
    text = render_text(command, "json", model)
    assert type(model).model_validate_json(text) == model
    return json.loads(text)
