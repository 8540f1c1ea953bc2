"""The run-wide pipeline: ``RUN_WIDE``'s stages, run once per run over what no single target holds,
after the targets' reports (the analyzer's, a callback): the script's program read from its source (each
file parsed, the source rules SL4xx over the whole program), the process rules over several processes' runs
(``run --processes``), the suppression comments applied to every finding of the run (the targets' and
these), the unused ones reported (SL001), and the rules the report documents. ``lint_run`` is lint's order
of them; the analyzer finds the files and reads them (analyzer/context/program_files.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..models.process_runs import GrowingTransfer
from ..models.report import Finding, RuleDoc, Severity, SourceLocation, TargetReport
from ..models.rule_codes import SL001
from ..rules.registry import Emitter
from ..rules.source_check import ProgramFindings, check_program
from ..rules.source_parse import Parsed, parse_source
from ..rules.suppressions import Suppression, apply_suppressions, find_suppressions
from ..rules.table import RULES, rule_docs
from .pass_manager import Pipeline
from .rule_stage import sort_findings

RUN_WIDE = Pipeline("run-wide", ("targets", "source-parse", "source-rules", "process-rules", "suppressions",
                                 "unused-suppressions", "report-rules"), reads={
    "targets": (),
    "source-parse": (),
    "source-rules": ("source-parse",),  # the program's files, followed import by import
    "process-rules": ("targets",),  # the processes' runs of the same targets
    "suppressions": ("targets", "source-rules", "process-rules"),  # the findings they silence
    "unused-suppressions": ("suppressions",),
    "report-rules": (),
})


def parsed_source(file: str, text: str) -> Parsed:
    """Stage 2: one file of the program parsed (with the newest grammar this Python has)."""
    return RUN_WIDE.run("source-parse", parse_source, file, text)


def program_rule_findings(texts: dict[str, str], roots: tuple[str, ...], disabled: frozenset[str],
                          severities: dict[str, Severity]) -> ProgramFindings:
    """Stage 3: the source rules over the program (file -> text; the folders its modules are named from)."""
    return RUN_WIDE.run("source-rules", check_program, texts, roots, disabled, severities)


def process_rule_findings(code: str, severities: dict[str, Severity], message: str, where: SourceLocation | None,
                          **fields: Any) -> list[Finding]:
    """Stage 4: a process rule's finding (SL401, SL402 over several processes' runs), at its severity."""
    def emitted() -> list[Finding]:
        rule = RULES[code]
        emitter = Emitter(rule, severities.get(code, rule.severity))
        emitter.emit(message, where, **fields)
        return emitter.findings

    return RUN_WIDE.run("process-rules", emitted)


def growing_transfer_findings(growing: list[GrowingTransfer], is_equality_check: Callable[[str], bool],
                               severities: dict[str, Severity], disabled: frozenset[str]) -> list[Finding]:
    """Stage 4 over the programs whose collectives grow with the process count: each the first rule's, in
    code order, whose ``process_growth`` trait reports it (SL401 JAX's check that every process passed the
    same value: ``is_equality_check`` of the program's name, which program that is the analyzer knows; SL402
    any other), its message and fix the rule file's."""
    findings: list[Finding] = []
    for g in growing:
        answers = ((code, answer) for code in sorted(RULES)
                   if (measure := RULES[code].traits.process_growth) is not None
                   and (answer := measure(g, is_equality_check(g.program))) is not None)
        found = next(answers, None)
        if found is None:
            continue
        code, (message, fix) = found
        if code in disabled:
            continue
        findings += process_rule_findings(code, severities, message, g.source, fix=fix, subject=g.program,
                                          total_bytes=g.bytes_by_processes[-1][1])
    return findings


def failed_fetch_findings(processes: int, error: str, where: SourceLocation,
                          severities: dict[str, Severity], disabled: frozenset[str]) -> list[Finding]:
    """Stage 4 for a script that runs as one process and fails as several fetching an array that spans
    other processes' devices: the finding of the rule whose ``failed_fetch`` trait says it (SL402) at the
    user's line (none where it is disabled), its message and fix the rule file's."""
    code = next((c for c in sorted(RULES) if RULES[c].traits.failed_fetch is not None), None)
    measure = RULES[code].traits.failed_fetch if code is not None else None
    if code is None or measure is None or code in disabled:
        return []
    message, fix = measure(processes, error)
    return process_rule_findings(code, severities, message, where, fix=fix)


def suppressions_in(file: str, text: str) -> list[Suppression]:
    """Stage 5: the suppression comments of one file."""
    return RUN_WIDE.run("suppressions", find_suppressions, file, text)


def file_suppressions(files: list[str], read_text: Callable[[str], str | None]) -> list[Suppression]:
    """Stage 5: the suppression comments of every file named, each once, in path order (``read_text``: the
    analyzer's read of a file, None where it cannot be read)."""
    found: list[Suppression] = []
    for path in sorted(set(files)):
        if (text := read_text(path)) is not None:
            found.extend(suppressions_in(path, text))
    return found


def suppressed(reports: list[TargetReport], run_findings: list[Finding], suppressions: list[Suppression],
               same_file: Callable[[str, str], bool], disabled: frozenset[str], severities: dict[str, Severity],
               report_unused: bool) -> tuple[list[TargetReport], list[Finding]]:
    """Stages 5 and 6: the targets' findings and the run-wide ones without those a suppression silences,
    each target counting what it lost, and (``report_unused``) a suppression that silences nothing as SL001."""
    if not suppressions:
        return reports, RUN_WIDE.run("suppressions", sort_findings, run_findings)
    used: set[tuple[str, int, str]] = set()
    out = []
    everything = {(s, c) for s in suppressions for c in (s.codes or ("*",))}
    for rep in reports:
        outcome = RUN_WIDE.run("suppressions", apply_suppressions, rep.findings, suppressions, same_file)
        for s, code in everything - set(outcome.unused):
            used.add((s.file, s.line, code))
        out.append(rep.model_copy(update={"findings": list(outcome.kept), "suppressed": outcome.suppressed}))
    outcome = RUN_WIDE.run("suppressions", apply_suppressions, run_findings, suppressions, same_file)
    for s, code in everything - set(outcome.unused):
        used.add((s.file, s.line, code))
    kept: list[Finding] = list(outcome.kept)
    if report_unused and SL001.code not in disabled:
        unused = [
            (s, c) for s in suppressions for c in (s.codes or ("*",))
            if (s.file, s.line, c) not in used and (c == "*" or c not in disabled)
        ]
        kept += RUN_WIDE.run("unused-suppressions", _unused_findings, unused, severities)
    return out, sort_findings(kept)


def _unused_findings(unused: list[tuple[Suppression, str]], severities: dict[str, Severity]) -> list[Finding]:
    rule = RULES[SL001.code]
    emitter = Emitter(rule, severities.get(SL001.code, rule.severity))
    rule.check(unused, emitter)
    return emitter.findings


@dataclass(frozen=True)
class ProgramSource:
    """A script's program as the analyzer read it (stage 2 parses each file to follow its imports)."""

    files: tuple[str, ...]  # the script first, then the modules it reaches
    roots: tuple[str, ...]  # the folders module names start from
    texts: dict[str, str]


@dataclass(frozen=True)
class LintRun:
    """What a lint run reports beside the versions: the targets' reports with what suppressions silenced, the
    run-wide findings, the files the source rules read with a newer grammar or left out, the rules documented."""

    reports: list[TargetReport]
    findings: list[Finding]
    source_notes: list[str]
    rules: list[RuleDoc]


def lint_run(analyze_targets: Callable[[], list[TargetReport]], read_program: Callable[[], ProgramSource | None],
             read_text: Callable[[str], str | None], display_path: Callable[[str], str],
             same_file: Callable[[str, str], bool], script: str, disabled: frozenset[str],
             severities: dict[str, Severity], report_unused: bool) -> LintRun:
    """lint's run, in order, around the analyzer's callbacks: every target's report (its load, lowering,
    compiles and fix checks), the program's files (read and parsed by the analyzer), the source rules over
    them, the suppression comments of the script, the program and every file a finding names (``read_text``:
    None for a file that cannot be read) applied, the unused ones reported (``report_unused``), the rules
    documented. ``display_path`` writes a note's file as the report shows it."""
    reports = RUN_WIDE.run("targets", analyze_targets)  # 1
    program = read_program()  # 2
    from_source: list[Finding] = []
    notes: list[str] = []
    if program is not None:
        found = program_rule_findings(program.texts, program.roots, disabled, severities)  # 3
        from_source = list(found.findings)
        for note in found.notes:
            path = next((p for p in program.texts if note.startswith(p + ": ")), None)
            notes.append(display_path(path) + note[len(path):] if path else note)
    files = [script, *(program.files if program else ()),
             *(f.source.file for r in reports for f in r.findings if f.source is not None)]
    reports, run_findings = suppressed(reports, from_source, file_suppressions(files, read_text), same_file,
                                       disabled, severities, report_unused)  # 5, 6
    return LintRun(reports, run_findings, notes, RUN_WIDE.run("report-rules", rule_docs, disabled, severities))  # 7
