"""The source rules run over a whole program: the script and the first-party modules it reaches,
each file's AST read once, the program's flow built once, each rule of scope SOURCE checked per file."""

from __future__ import annotations

from dataclasses import dataclass

from ..models.report import Finding, Severity
from ..models.rule_codes import Scope
from .registry import Emitter
from .source_facts import collect_facts
from .source_parse import parse_source
from .source_program_build import build_program
from .table import RULES


@dataclass(frozen=True)
class SourceFacts:
    """What the source pass found, for one file."""

    file: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class ProgramFindings:
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]  # files read with a newer grammar, or not analysed, and why
    initialize_file: str | None = None  # a file of the program that calls jax.distributed.initialize


def check_program(texts: dict[str, str], roots: tuple[str, ...] = (), disabled: frozenset[str] = frozenset(),
                  severities: dict[str, Severity] | None = None) -> ProgramFindings:
    """``texts``: file -> source; ``roots``: the folders its modules are named from."""
    trees, notes = {}, []
    for file in sorted(texts):
        parsed = parse_source(file, texts[file])
        if parsed.note:
            notes.append(f"{file}: {parsed.note}")
        if parsed.tree is not None:
            trees[file] = parsed.tree
    program = build_program(trees, roots)
    severities = severities or {}
    out: list[Finding] = []
    for file, tree in program.trees.items():
        facts = collect_facts(tree, file)
        facts.program = program
        for code in sorted(RULES):
            r = RULES[code]
            if r.scope is not Scope.SOURCE or code in disabled:
                continue
            emitter = Emitter(r, severities.get(code, r.severity))
            r.check((tree, facts), emitter)
            out.extend(emitter.findings)
    out.sort(key=lambda f: (f.source.file if f.source else "", f.source.line if f.source else 0, f.rule))
    return ProgramFindings(tuple(out), tuple(notes), program.initialize_file)


def check_source(file: str, text: str, disabled: frozenset[str] = frozenset(),
                 severities: dict[str, Severity] | None = None) -> SourceFacts:
    return SourceFacts(file, check_program({file: text}, (), disabled, severities).findings)
