"""``# shard-lint: ignore[CODE]`` comments: which findings they silence and which
silence nothing (reported as SL001, as ruff's RUF100 does)."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

from ..models.report import Finding

_COMMENT = re.compile(r"#\s*shard-lint:\s*ignore(?:\[([A-Za-z0-9_,\s-]*)\])?")


@dataclass(frozen=True)
class Suppression:
    file: str
    line: int
    codes: tuple[str, ...]  # empty: every rule


def find_suppressions(file: str, text: str) -> list[Suppression]:
    """Suppression comments in Python source; strings that merely contain the
    marker do not count."""
    out: list[Suppression] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return out
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        m = _COMMENT.search(tok.string)
        if m:
            codes = tuple(c.strip().upper() for c in (m.group(1) or "").split(",") if c.strip())
            out.append(Suppression(file, tok.start[0], codes))
    return out


@dataclass(frozen=True)
class SuppressionOutcome:
    kept: tuple[Finding, ...]
    suppressed: int
    unused: tuple[tuple[Suppression, str], ...]  # (suppression, code or "*")


def apply_suppressions(
    findings: list[Finding], suppressions: list[Suppression], same_file: Callable[[str, str], bool]
) -> SuppressionOutcome:
    """Drop findings whose source line carries a matching suppression.

    ``same_file(a, b)`` decides whether two spellings of a path name one file.
    """
    used: set[tuple[int, str]] = set()
    kept, suppressed = [], 0
    for f in findings:
        hit = None
        if f.source is not None:
            for i, s in enumerate(suppressions):
                if s.line == f.source.line and same_file(s.file, f.source.file) and (not s.codes or f.rule in s.codes):
                    hit = (i, f.rule if s.codes else "*")
                    break
        if hit is None:
            kept.append(f)
        else:
            used.add(hit)
            suppressed += 1
    unused = []
    for i, s in enumerate(suppressions):
        for code in s.codes or ("*",):
            if (i, code) not in used:
                unused.append((s, code))
    return SuppressionOutcome(tuple(kept), suppressed, tuple(unused))
