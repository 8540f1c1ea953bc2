"""A first-party file's syntax tree, also where the file uses syntax newer than the Python the
tool runs in (PEP 695's ``def f[T](...)``, ``class C[T]:`` and ``type X = ...`` on Python 3.11).

``ast`` parses what this interpreter knows. Where it cannot, parso (a pure-Python parser with the
grammars of every Python release) finds the newer syntax, which is blanked out column for column (a
type parameter list is nothing the rules read; ``type X = v`` becomes ``X = v``), so ``ast`` reads
the rest with every line where it was. A file neither can read is returned with the reason, and
the report names it as not analysed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Parsed:
    tree: ast.Module | None
    note: str | None = None  # how it was read, or why it was not


def _newest_grammar() -> tuple[Any, str | None]:
    import parso  # type: ignore[import-untyped, unused-ignore]

    for version in ("3.14", "3.13", "3.12"):
        try:
            return parso.load_grammar(version=version), version
        except (NotImplementedError, FileNotFoundError):
            continue
    return None, None


def _blank(lines: list[str], start: tuple[int, int], end: tuple[int, int], cut: bool = False) -> None:
    """Spaces over [start, end) (parso's 1-based lines, 0-based columns), line breaks kept; ``cut``: the
    text and the spaces after it taken out instead (a statement's first word: its indent must stay)."""
    (l0, c0), (l1, c1) = start, end
    if cut:
        text = lines[l0 - 1]
        lines[l0 - 1] = text[:c0] + text[c1:].lstrip(" \t")
        return
    for ln in range(l0, l1 + 1):
        text = lines[ln - 1]
        a = c0 if ln == l0 else 0
        b = c1 if ln == l1 else len(text.rstrip("\r\n"))
        lines[ln - 1] = text[:a] + " " * (b - a) + text[b:]


def _newer_syntax(module) -> list[tuple[tuple[int, int], tuple[int, int], bool]]:  # type: ignore[no-untyped-def]
    """The spans to blank, last first: type parameter lists; the soft keyword of a ``type`` statement
    (cut)."""
    spans = []
    todo = [module]
    while todo:
        node = todo.pop()
        children = getattr(node, "children", [])
        if node.type == "type_params":
            spans.append((node.start_pos, node.end_pos, False))
            continue
        if node.type == "error_node" and len(children) == 1 and getattr(children[0], "value", None) == "type":
            spans.append((children[0].start_pos, children[0].end_pos, True))
            continue
        todo.extend(children)
    return sorted(spans, reverse=True)  # a cut moves what follows it on its line


def parse_source(file: str, text: str) -> Parsed:
    try:
        return Parsed(ast.parse(text, filename=file))
    except SyntaxError as e:
        first = e
    except ValueError as e:  # a NUL byte
        return Parsed(None, f"not analysed: {e}")
    try:
        grammar, version = _newest_grammar()
    except ImportError:
        grammar, version = None, None
    if grammar is None:
        return Parsed(None, f"not analysed: syntax error at line {first.lineno}: {first.msg} "
                            "(newer Python syntax needs parso installed)")
    spans = _newer_syntax(grammar.parse(text))
    lines = text.splitlines(keepends=True)
    for start, end, cut in spans:
        _blank(lines, start, end, cut)
    try:
        tree = ast.parse("".join(lines), filename=file)
    except SyntaxError:
        return Parsed(None, f"not analysed: syntax error at line {first.lineno}: {first.msg}")
    return Parsed(tree, f"read with Python {version}'s grammar (parso): newer than this Python's")
