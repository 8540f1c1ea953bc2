"""Which renderer writes each command's report in each format: the one table,
from which the command line's ``--format`` choices derive.

Renderers are named here, not imported: the supervising parent builds the
argument parser from this table and imports neither rich nor pydantic. A
terminal renderer draws on a rich Console (``render(report, console, **extra)``);
every other format is text (``render(report) -> str``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

TERMINAL = "terminal"
FORMAT_HELP = {
    "terminal": "a terminal (default)",
    "json": "JSON (its schema: jax-shard-lint schema COMMAND)",
    "html": "one self-contained HTML file (use with -o)",
    "sarif": "SARIF 2.1.0, for code scanning",
    "markdown": "Markdown (a pull-request comment)",
}

_FINDINGS = {
    "terminal": "terminal:render_terminal", "json": "json_report:render_json", "html": "html:render_html",
    "sarif": "sarif:render_sarif", "markdown": "markdown:render_lint_markdown",
}
RENDERERS: dict[str, dict[str, str]] = {
    "lint": _FINDINGS,
    "run": _FINDINGS,
    "check": _FINDINGS,
    "fit": {"terminal": "fit_terminal:render_fit", "json": "json_report:render_json"},
    "sweep": {"terminal": "sweep_report:render_sweep_terminal", "json": "json_report:render_json",
              "html": "sweep_report:render_sweep_html", "markdown": "sweep_report:render_sweep_markdown"},
    "propagate": {"terminal": "propagation_terminal:render_propagation", "json": "json_report:render_json",
                  "html": "html_runs:render_propagation_html", "markdown": "markdown:render_propagation_markdown"},
    "rewrite": {"terminal": "rewrite_terminal:render_rewrite", "json": "json_report:render_json",
                "html": "html_runs:render_rewrite_html", "markdown": "markdown:render_rewrite_markdown"},
    "suggest": {"terminal": "suggest_report:render_suggest_terminal", "json": "json_report:render_json",
                "html": "suggest_report:render_suggest_html", "markdown": "suggest_report:render_suggest_markdown"},
    "gate": {"terminal": "gate_terminal:render_gate", "markdown": "markdown:render_gate_markdown",
             "json": "json_report:render_json"},
}


def formats(command: str) -> tuple[str, ...]:
    """The formats a command writes, in the order --help lists them."""
    return tuple(RENDERERS[command])


def format_help(command: str) -> str:
    return "; ".join(f"{fmt}: {FORMAT_HELP[fmt]}" for fmt in formats(command))


def renderer(command: str, fmt: str) -> Callable[..., Any]:
    module, _, function = RENDERERS[command][fmt].partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)
