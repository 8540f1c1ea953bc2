"""The tables and target sections of the HTML reports: their markup built in one
place, every cell escaped here unless the renderer hands over markup it built
from escaped parts (``markup``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .html_page import e


@dataclass(frozen=True)
class Cell:
    """One ``<td>``: its content as HTML, and what its attributes say."""

    html: str
    sort: object = None  # data-v: what a sortable column orders by (the number behind the text)
    title: str | None = None  # the text shown on hover
    cls: str | None = None


def cell(text: object, *, sort: object = None, title: str | None = None, cls: str | None = None) -> Cell:
    """A cell of text (escaped)."""
    return Cell(e(text), sort, title, cls)


def markup(html: str, *, sort: object = None, title: str | None = None, cls: str | None = None) -> Cell:
    """A cell of markup the renderer built, every string in it already escaped."""
    return Cell(html, sort, title, cls)


@dataclass(frozen=True)
class Row:
    """A ``<tr>`` with a class (``""`` still writes the attribute; None leaves it out)."""

    cells: Sequence[Cell | object]
    cls: str | None = None


def _td(value: Cell | object) -> str:
    c = value if isinstance(value, Cell) else cell(value)
    attrs = "".join((
        f' class="{e(c.cls)}"' if c.cls is not None else "",
        f' title="{e(c.title)}"' if c.title is not None else "",
        f' data-v="{e(c.sort)}"' if c.sort is not None else "",
    ))
    return f"<td{attrs}>{c.html}</td>"


def table(head: Sequence[str], rows: Iterable[Row | Sequence[Cell | object]], cls: str | None = None) -> str:
    """A table: the column headings, then one row per item (a plain value is a text cell)."""
    body = "".join(
        (f'<tr class="{e(r.cls)}">' if isinstance(r, Row) and r.cls is not None else "<tr>")
        + "".join(_td(c) for c in (r.cells if isinstance(r, Row) else r)) + "</tr>"
        for r in rows)
    opening = f'<table class="{e(cls)}">' if cls is not None else "<table>"
    return (f"{opening}<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>")


def target_section(name: str | None, body: str) -> str:
    """A section of the page: one target's (its name as the heading), or the run's own (None)."""
    opening = (f'<section class="target" data-target="{e(name)}"><h2>{e(name)}</h2>' if name is not None
               else '<section class="target">')
    return f"{opening}{body}</section>"
