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
