"""Tables that fit the terminal: essential columns stay whole, low-value columns
drop first, and long file paths are shortened from the left (``…/models/gpt2.py:41``)
instead of collapsing to ``al… │ …``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rich.table import Table
from rich.text import Text

from .terminal_safe import as_written

# Per column: the two padding spaces and its left border.
_COLUMN_OVERHEAD = 3
MIN_PATH_WIDTH = 18
MIN_SHORT_PATH_WIDTH = 12


@dataclass
class Column:
    """A column of a fitted table. ``values`` are terminal_safe'd text (markup escaped, as the rest of a
    terminal report); the cells show them as written (rich ``Text``, never parsed as markup)."""
    header: str
    values: list[str]
    essential: bool = True
    justify: Literal["default", "left", "center", "right", "full"] = "left"
    path: bool = False  # shortened from the left when space runs out
    fold: bool = False  # wrapped instead of shortened
    kwargs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Undone here, before widths are measured and cells wrapped: the escape is not part of the name.
        self.values = [as_written(v) for v in self.values]

    @property
    def natural(self) -> int:
        # A cell may hold several lines (a combined collective's part lines): its widest counts.
        return max([len(self.header), *(len(line) for v in self.values for line in v.split("\n"))])


# Where a folded cell may break: after a space, a comma or a slash, and before a pytree key
# ("['down']"), never inside a name (collective-permute, opt_state, 'fsdp'), nor between a markup
# escape's backslash and its bracket ("\\[bold]" split would be markup on the next line).
_BREAK_AFTER = re.compile(r"(?<=[ ,/])|(?<!\\)(?=\[)")


def _pieces(text: str) -> list[str]:
    return [p for p in _BREAK_AFTER.split(text) if p]


def longest_piece(values: list[str]) -> int:
    return max([0, *(len(p.rstrip()) for v in values for line in v.split("\n") for p in _pieces(line))])


def wrap_at_breaks(text: str, width: int) -> str:
    """``text`` in lines of at most ``width``, broken only where _BREAK_AFTER allows;
    a piece longer than the width is left whole (rich folds it: nothing else can)."""
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for piece in _pieces(line):
            if current and len((current + piece).rstrip()) > width:
                out.append(current.rstrip())
                current = piece.lstrip()
            else:
                current += piece
        out.append(current.rstrip())
    return "\n".join(out)


_WORD = re.compile(r"(?<= )")


def wrap_words(text: str, width: int) -> str:
    """``text`` in lines of at most ``width``, broken between words; a word longer than a line
    (a pytree path) starts a line and breaks where _BREAK_AFTER allows (before a ``['key']``), and
    a piece longer than that is left whole for rich to fold."""
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for word in (w for w in _WORD.split(line) if w):
            if current and len((current + word).rstrip()) > width:
                out.append(current.rstrip())
                current = ""
            if not current and len(word.rstrip()) > width:
                *whole, current = wrap_at_breaks(word, width).split("\n")
                out.extend(whole)
                current += " " if word.endswith(" ") else ""
            else:
                current += word
        out.append(current.rstrip())
    return "\n".join(out)


def shorten_left(text: str, width: int) -> str:
    """``examples/models/gpt2_flax.py:35`` -> ``…/gpt2_flax.py:35``, cut at a '/'
    where one falls inside the width."""
    if len(text) <= width:
        return text
    tail = text[-(width - 1):]
    cut = tail.find("/")
    if 0 <= cut < len(tail) - 4:
        tail = tail[cut:]
    return "…" + tail


def fitted_table(title: str, columns: list[Column], width: int, caption: str | None = None) -> Table:
    """A table of at most ``width`` characters: optional columns are dropped right
    to left until the essential ones fit, then path columns are shortened."""
    cols = list(columns)

    def total(cs):
        return sum(c.natural + _COLUMN_OVERHEAD for c in cs) + 1

    while total(cols) > width and any(not c.essential for c in cols):
        drop = max(i for i, c in enumerate(cols) if not c.essential)
        cols.pop(drop)
    excess = total(cols) - width
    limits = {id(c): c.natural for c in cols if c.path or c.fold}
    # Wrapping a folded column at its word boundaries costs nothing read: do that
    # before a path loses its folders.
    # A folded column wraps at its break points (wrap_at_breaks), never narrower than its
    # longest piece: a name is not broken.
    floors = {id(c): max(len(c.header), longest_piece(c.values)) for c in cols if c.fold and not c.path}
    # Take the excess from the widest shrinkable column first, down to MIN_PATH_WIDTH, then
    # shorten paths further (a path shortened from the left still names its file and line)
    # before any folded column breaks inside a name.
    for floor in (MIN_PATH_WIDTH, MIN_SHORT_PATH_WIDTH):
        while excess > 0:
            wide = [k for k, v in limits.items() if v > max(floor, floors.get(k, 0))]
            if not wide:
                break
            k = max(wide, key=lambda k: limits[k])
            limits[k] -= 1
            excess -= 1
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for c in cols:
        limit = limits.get(id(c))
        kw = dict(c.kwargs)
        if c.fold:
            kw.update(overflow="fold", max_width=limit)
        else:
            kw["no_wrap"] = True
        table.add_column(c.header, justify=c.justify, **kw)
    for row in range(len(cols[0].values) if cols else 0):
        cells = []
        for c in cols:
            v = c.values[row]
            limit = limits.get(id(c))
            if c.path and limit is not None:
                v = "\n".join(shorten_left(line, limit) for line in v.split("\n"))
            elif c.fold and limit is not None:
                v = wrap_at_breaks(v, limit)
            cells.append(Text(v))
        table.add_row(*cells)
    return table
