"""Text from a program made inert in Markdown."""

from __future__ import annotations

import html
import re


def cell(text: str) -> str:
    """Text from a program (names, paths, messages) as inert Markdown: one line, HTML
    as entities (no <script>, no <img onerror>, no <!--), and the characters that
    make links, code or table cells escaped (no [x](javascript:...)). Underscores
    stay: file names are full of them and intraword ones are not emphasis."""
    text = " ".join(text.replace("\r", "\n").split("\n"))
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`\[\]|])", r"\\\1", text)


def _fence_length(text: str, shortest: int) -> int:
    """Backticks enough that no run of backticks inside ``text`` closes the fence early."""
    return max([shortest - 1, *(len(run) for run in re.findall(r"`+", text))]) + 1


def code_span(text: str) -> str:
    """Python from a program as inline code: shown as written (in code, HTML and Markdown are
    literal), one line, fenced by more backticks than any run inside it, so a name holding
    backticks cannot end the span and write Markdown after it."""
    text = " ".join(text.replace("\r", "\n").split("\n"))
    fence = "`" * _fence_length(text, 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""  # CommonMark strips one space each side
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, language: str = "python") -> list[str]:
    """Python from a program as a fenced block (its lines), fenced by more backticks than any run
    inside it: a closing fence must be at least as long as the opening one, so no line of the
    text can close it."""
    fence = "`" * _fence_length(text, 3)
    return [f"{fence}{language}", *text.replace("\r", "\n").split("\n"), fence]
