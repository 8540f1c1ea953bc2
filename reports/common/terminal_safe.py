"""Names and messages from user input made inert for a terminal.

A target name, a pytree path, a file name in a ``.mlir`` location or a crafted
baseline can hold rich markup (``[/]`` would crash the renderer, ``[bogus]x``
would print as ``x``) or terminal escape sequences (``ESC]0;`` retitles the
window, ``ESC[2J`` clears it). Every terminal renderer passes its model through
``terminal_safe`` first: markup is escaped, control characters are shown as
``\\xNN``, and nothing else changes.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from rich.markup import escape
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text))


# What rich.markup.escape wrote: a backslash before a tag (and the backslashes before it doubled).
_ESCAPED_TAG = re.compile(r"(\\*)\\(\[[a-z#/@][^[]*?])")


def as_written(text: str) -> str:
    """Text that terminal_safe escaped, as the user wrote it, for a ``rich.text.Text`` (never
    parsed as markup, so the escape's backslashes would show: ``\\[bold]``). Text without an
    escaped tag is returned unchanged (a name ending in a lone backslash keeps the one escape added)."""
    return _ESCAPED_TAG.sub(lambda m: m.group(1)[: len(m.group(1)) // 2] + m.group(2), text)


def shown(text: str, style: str = "") -> Text:
    """``Text`` of terminal_safe'd text: the names in it shown as written, never as markup."""
    return Text(as_written(text), style=style)


def code_text(text: str) -> str:
    """Python to paste, for a ``rich.text.Text`` (never parsed as markup): only control
    characters are shown as ``\\xNN``; brackets stay as they are."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def terminal_safe(value: Any) -> Any:
    if type(value) is str:  # not a str enum (Severity): its members are ours, and stay members
        return safe_text(value)
    if isinstance(value, BaseModel):
        return value.model_copy(update={name: terminal_safe(getattr(value, name)) for name in type(value).model_fields})
    if isinstance(value, list):
        return [terminal_safe(v) for v in value]
    if isinstance(value, tuple):
        return tuple(terminal_safe(v) for v in value)
    if isinstance(value, dict):
        return {terminal_safe(k): terminal_safe(v) for k, v in value.items()}
    return value
