"""The source rules run over one file: its AST read once, each rule of scope SOURCE checked."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..models.report import Finding, Severity
from ..models.rule_codes import Scope
from .registry import Emitter
from .source_facts import collect_facts
from .table import RULES


@dataclass(frozen=True)
class SourceFacts:
    """What the source pass found, for one file."""

    file: str
    findings: tuple[Finding, ...]


def check_source(file: str, text: str, disabled: frozenset[str] = frozenset(),
                 severities: dict[str, Severity] | None = None) -> SourceFacts:
    try:
        tree = ast.parse(text, filename=file)
    except SyntaxError:
        return SourceFacts(file, ())
    facts = collect_facts(tree, file)
    severities = severities or {}
    out: list[Finding] = []
    for code in sorted(RULES):
        r = RULES[code]
        if r.scope is not Scope.SOURCE or code in disabled:
            continue
        emitter = Emitter(r, severities.get(code, r.severity))
        r.check((tree, facts), emitter)
        out.extend(emitter.findings)
    out.sort(key=lambda f: (f.source.line if f.source else 0, f.rule))
    return SourceFacts(file, tuple(out))
