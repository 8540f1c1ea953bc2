"""One registry of rules. A rule is a function registered with ``@rule``; its
docstring, with the sections What it does / Why is this bad / Example / Fix, is
the one text behind ``jax-shard-lint rule CODE``, the HTML report and SARIF.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..models.report import Finding, Severity, SourceLocation

DOC_SECTIONS = ("What it does", "Why is this bad", "Example", "Fix")
_CODE = re.compile(r"^SL\d{3}$")
_NAME = re.compile(r"^[a-z]+(-[a-z]+)*$")


@dataclass(frozen=True)
class RuleOption:
    name: str
    default: Any
    kind: str  # "bytes", "fraction", "int"
    help: str


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    doc: str
    options: tuple[RuleOption, ...]
    check: Callable[[Any], Iterable[Finding]] = field(repr=False)
    scope: str = "target"  # "target": compiled-program facts; "meta": runs after suppression

    def section(self, title: str) -> str:
        """The text of one documentation section."""
        m = re.search(rf"^{re.escape(title)}\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", self.doc, re.S | re.M)
        return m.group(1).strip() if m else ""


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, options: tuple[RuleOption, ...] = (), scope: str = "target"):
    def register(fn):
        if not _CODE.match(code):
            raise ValueError(f"rule code {code!r} must look like SL123")
        if not _NAME.match(name):
            raise ValueError(f"rule name {name!r} must be kebab-case")
        if code in RULES:
            raise ValueError(f"duplicate rule code {code}")
        doc = inspect.getdoc(fn) or ""
        summary = doc.split("\n\n", 1)[0].strip()
        RULES[code] = Rule(code, name, severity, summary, doc, tuple(options), fn, scope)
        return fn

    return register


def all_options() -> dict[str, RuleOption]:
    out: dict[str, RuleOption] = {}
    for r in RULES.values():
        for opt in r.options:
            out[opt.name] = opt
    return out


def find_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    if key.upper() in RULES:
        return RULES[key.upper()]
    return next((r for r in RULES.values() if r.name == key), None)


@dataclass
class Emitter:
    """Builds findings for one rule, applying the configured severity."""

    rule: Rule
    severity: Severity
    findings: list[Finding] = field(default_factory=list)

    def emit(
        self, message: str, source: SourceLocation | None, fix: str | None = None, subject: str | None = None,
        via: SourceLocation | None = None, why: list[str] | None = None,
    ) -> None:
        self.findings.append(Finding(
            rule=self.rule.code, name=self.rule.name, severity=self.severity,
            message=message, source=source, via=via, fix=fix, subject=subject, provenance=list(why or []),
        ))


def rule_docs(disabled: frozenset[str] = frozenset(), severities: dict | None = None):
    """The documentation of every enabled rule, as report models."""
    from ..models.report import RuleDoc

    severities = severities or {}
    return [
        RuleDoc(code=r.code, name=r.name, severity=severities.get(r.code, r.severity), summary=r.summary, doc=r.doc)
        for code, r in sorted(RULES.items()) if code not in disabled
    ]
