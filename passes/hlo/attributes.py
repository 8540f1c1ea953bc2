"""The lexical layer of HLO text: bracket-balanced splitting, an instruction's
attribute list (``key=value, ...``) and its ``metadata={...}``; C-style strings
are skipped whole, so a comma or brace inside a file name never splits."""

from __future__ import annotations

import re

from ..models.errors import HloParseError

_METADATA_STR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_METADATA_INT = re.compile(r"(\w+)=(-?\d+)(?=[\s}]|$)")
_UNESCAPE = re.compile(r"\\(.)")

# Brackets, commas and whole double-quoted strings: everything else is skipped in C.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{},]')
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    parts, start, depth = [], 0, 0
    for m in _STRUCTURE.finditer(text):
        ch = m.group()
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:m.start()])
            start = m.end()
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def balanced_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at text[start]."""
    depth = 0
    for m in _STRUCTURE.finditer(text, start):
        ch = m.group()
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.end()
    raise HloParseError(f"unbalanced brackets in: {text[:120]}")


def open_brackets(text: str) -> int:
    """How many brackets ``text`` leaves open, strings skipped: above 0 while an
    instruction printed over several lines is not finished."""
    return sum((ch in _OPEN) - (ch in _CLOSE) for ch in map(_group, _STRUCTURE.finditer(text)))


def _group(m: re.Match[str]) -> str:
    return m.group()


def parse_attributes(text: str) -> tuple[dict[str, str], dict[str, str | int]]:
    attrs: dict[str, str] = {}
    metadata: dict[str, str | int] = {}
    for part in split_top_level(text.lstrip(", ")):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        key = key.strip()
        if key == "metadata":
            metadata = parse_metadata(value)
        else:
            attrs[key] = value.strip()
    return attrs, metadata


def parse_metadata(text: str) -> dict[str, str | int]:
    inner = text.strip()[1:-1]
    out: dict[str, str | int] = {}
    for m in _METADATA_STR.finditer(inner):
        value = m.group(2)
        out[m.group(1)] = _UNESCAPE.sub(r"\1", value) if "\\" in value else value
    stripped = _METADATA_STR.sub("", inner)
    for m in _METADATA_INT.finditer(stripped):
        out[m.group(1)] = int(m.group(2))
    return out


# name = shape opcode( for an array-shaped instruction, the common case, in one match.
