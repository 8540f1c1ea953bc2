"""Which renderer writes each command's report in each format: the one table,
from which the command line's ``--format`` choices derive. A renderer lives in
``reports/<command>/<format>.py`` (lint, run and check share ``findings/``);
what several formats share is in ``reports/common/``.

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
    "terminal": "findings.terminal:render_terminal", "json": "common.json:render_json",
    "html": "findings.html:render_html", "sarif": "findings.sarif:render_sarif",
    "markdown": "findings.markdown:render_lint_markdown",
}
RENDERERS: dict[str, dict[str, str]] = {
    "lint": _FINDINGS,
    "run": _FINDINGS,
    "check": _FINDINGS,
    "fit": {"terminal": "fit.terminal:render_fit", "json": "common.json:render_json"},
    "sweep": {"terminal": "sweep.terminal:render_sweep_terminal", "json": "common.json:render_json",
              "html": "sweep.html:render_sweep_html", "markdown": "sweep.markdown:render_sweep_markdown"},
    "propagate": {"terminal": "propagate.terminal:render_propagation", "json": "common.json:render_json",
                  "html": "propagate.html:render_propagation_html",
                  "markdown": "propagate.markdown:render_propagation_markdown"},
    "rewrite": {"terminal": "rewrite.terminal:render_rewrite", "json": "common.json:render_json",
                "html": "rewrite.html:render_rewrite_html", "markdown": "rewrite.markdown:render_rewrite_markdown"},
    "suggest": {"terminal": "suggest.terminal:render_suggest_terminal", "json": "common.json:render_json",
                "html": "suggest.html:render_suggest_html", "markdown": "suggest.markdown:render_suggest_markdown"},
    "gate": {"terminal": "gate.terminal:render_gate", "markdown": "gate.markdown:render_gate_markdown",
             "json": "common.json:render_json"},
}


def formats(command: str) -> tuple[str, ...]:
    """The formats a command writes, in the order --help lists them."""
    return tuple(RENDERERS[command])


def format_help(command: str) -> str:
    return "; ".join(f"{fmt}: {FORMAT_HELP[fmt]}" for fmt in formats(command))


def renderer(command: str, fmt: str) -> Callable[..., Any]:
    module, _, function = RENDERERS[command][fmt].partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)
