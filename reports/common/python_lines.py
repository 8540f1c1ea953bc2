"""Python text the tool prints, folded over lines: a bracket whose contents do not fit the width opens a
block with one element a line (one argument path a line in a sharding table), as black lays it out.

Only the line breaks change: a newline inside brackets is Python's implicit line joining, no comma is
added or removed (``(x)`` stays ``(x)``, ``(x,)`` keeps its comma), and strings and comments are kept
as written, so the folded text parses to the same program as the one line."""

from __future__ import annotations

from dataclasses import dataclass, field

WIDTH = 100
INDENT = 4
# A bracket this short stays on its line even past the width: ``NamedSharding(mesh, P('data', 'model'))``
# after a long argument path reads better whole than as four lines.
SHORT = 48
_CLOSE = {"(": ")", "[": "]", "{": "}"}


@dataclass
class _Group:
    open: str
    elements: list[list[str | _Group]] = field(default_factory=lambda: [[]])
    close: str = ""


def folded(text: str, width: int = WIDTH) -> str:
    """Each line of ``text`` longer than ``width`` folded at its brackets (comment lines as written)."""
    return "\n".join(_folded_line(line, width) for line in text.split("\n"))


def _folded_line(line: str, width: int) -> str:
    if len(line) <= width or line.lstrip().startswith("#"):
        return line
    root = _parse(line)
    if root is None:
        return line
    lead = len(line) - len(line.lstrip())
    return " " * lead + _render(root.elements[0], lead, width)


def _parse(line: str) -> _Group | None:
    """The line as nested groups; None where its brackets or quotes do not balance (left as written)."""
    root = _Group(open="")
    stack = [root]
    i, n, chunk = 0, len(line), ""
    lambda_depth: list[bool] = [False]  # per open group: inside a lambda's parameters (its commas do not split)

    def flush() -> None:
        nonlocal chunk
        if chunk:
            stack[-1].elements[-1].append(chunk)
            chunk = ""

    while i < n:
        ch = line[i]
        if ch in "'\"":
            end = _string_end(line, i)
            if end is None:
                return None
            chunk += line[i:end]
            i = end
            continue
        if ch == "#":
            chunk += line[i:]
            break
        if ch in _CLOSE:
            flush()
            group = _Group(open=ch)
            stack[-1].elements[-1].append(group)
            stack.append(group)
            lambda_depth.append(False)
        elif ch in ")]}":
            if len(stack) == 1 or _CLOSE[stack[-1].open] != ch:
                return None
            flush()
            stack[-1].close = ch
            stack.pop()
            lambda_depth.pop()
        elif ch == "," and len(stack) > 1 and not lambda_depth[-1]:
            flush()
            stack[-1].elements[-1].append(",")
            stack[-1].elements.append([])
            i += 1
            while i < n and line[i] == " ":
                i += 1
            continue
        else:
            if line.startswith("lambda", i) and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
                lambda_depth[-1] = True
            elif ch == ":" and lambda_depth[-1]:
                lambda_depth[-1] = False
            chunk += ch
        i += 1
    flush()
    return root if len(stack) == 1 else None


def _string_end(line: str, start: int) -> int | None:
    quote, i = line[start], start + 1
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == quote:
            return i + 1
        i += 1
    return None


def _flat(pieces: list[str | _Group]) -> str:
    out = []
    for p in pieces:
        if isinstance(p, str):
            out.append(p + " " if p == "," else p)
        else:
            out.append(p.open + "".join(_flat(e) for e in p.elements).rstrip() + p.close)
    return "".join(out)


def _render(pieces: list[str | _Group], column: int, width: int) -> str:
    """The pieces from ``column`` on: a group whose flat text passes the width opens a block."""
    out, col = [], column
    for k, p in enumerate(pieces):
        if isinstance(p, str):
            out.append(p)
            col += len(p)
            continue
        flat = _flat([p])
        rest = len(_flat(pieces[k + 1:k + 2])) if k + 1 < len(pieces) and isinstance(pieces[k + 1], str) else 0
        if col + len(flat) + rest <= width or len(flat) <= SHORT or not any(p.elements[0]) and len(p.elements) == 1:
            out.append(flat)
            col += len(flat)
            continue
        indent = column + INDENT
        lines = [p.open]
        for element in p.elements:
            if not element:
                continue
            lines.append("\n" + " " * indent + _render(element, indent, width).rstrip())
        lines.append("\n" + " " * column + p.close)
        out.append("".join(lines))
        col = column + 1
    return "".join(out)
