"""The run-wide pipeline: ``RUN_WIDE``'s stages, run once per run over what no single target holds:
the script's program read from its source (each file parsed, the source rules SL4xx over the whole
program), the process rules over several processes' runs (``run --processes``), the suppression comments
applied to every finding of the run (the targets' and these), and the unused ones reported (SL001). The
analyzer finds the files and reads them (analyzer/context/program_files.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..models.process_runs import GrowingTransfer
from ..models.report import Finding, Severity, SourceLocation, TargetReport
from ..models.rule_codes import SL001, SL401, SL402, Code
from ..rules import sl401_replicated_device_put_multihost as sl401
from ..rules import sl402_reduction_outside_jit as sl402
from ..rules.registry import Emitter
from ..rules.source_check import ProgramFindings, check_program
from ..rules.source_parse import Parsed, parse_source
from ..rules.suppressions import Suppression, apply_suppressions, find_suppressions
from ..rules.table import RULES
from .pass_manager import Pipeline
from .rule_stage import sort_findings

__all__ = ["Parsed", "ProgramFindings", "Suppression"]

RUN_WIDE = Pipeline("run-wide", ("source-parse", "source-rules", "process-rules", "suppressions",
                                 "unused-suppressions"))


def parsed_source(file: str, text: str) -> Parsed:
    """Stage 1: one file of the program parsed (with the newest grammar this Python has)."""
    return RUN_WIDE.run("source-parse", parse_source, file, text)


def program_rule_findings(texts: dict[str, str], roots: tuple[str, ...], disabled: frozenset[str],
                          severities: dict[str, Severity]) -> ProgramFindings:
    """Stage 2: the source rules over the program (file -> text; the folders its modules are named from)."""
    return RUN_WIDE.run("source-rules", check_program, texts, roots, disabled, severities)


def process_rule_findings(code: Code, severities: dict[str, Severity], message: str, where: SourceLocation | None,
                          **fields: Any) -> list[Finding]:
    """Stage 3: a process rule's finding (SL401, SL402 over several processes' runs), at its severity."""
    def emitted() -> list[Finding]:
        rule = RULES[code.code]
        emitter = Emitter(rule, severities.get(code.code, rule.severity))
        emitter.emit(message, where, **fields)
        return emitter.findings

    return RUN_WIDE.run("process-rules", emitted)


def growing_transfer_findings(growing: list[GrowingTransfer], is_equality_check: Callable[[str], bool],
                               severities: dict[str, Severity], disabled: frozenset[str]) -> list[Finding]:
    """Stage 3 over the programs whose collectives grow with the process count: SL401 for JAX's check that
    every process passed the same value (``is_equality_check`` of the program's name: which program that is,
    the analyzer knows), SL402 for any other, each message and fix its rule file's."""
    findings: list[Finding] = []
    for g in growing:
        if is_equality_check(g.program):
            code, (message, fix) = SL401, sl401.measured_equality_check(g.kind, g.bytes_by_processes)
        else:
            code, (message, fix) = SL402, sl402.measured_growth(g.program, g.kind, g.bytes_by_processes)
        if code.code in disabled:
            continue
        findings += process_rule_findings(code, severities, message, g.source, fix=fix, subject=g.program,
                                          total_bytes=g.bytes_by_processes[-1][1])
    return findings


def failed_fetch_findings(processes: int, error: str, where: SourceLocation,
                          severities: dict[str, Severity], disabled: frozenset[str]) -> list[Finding]:
    """Stage 3 for a script that runs as one process and fails as several fetching an array that spans
    other processes' devices: SL402 at the user's line (none where it is disabled), its message and fix its
    rule file's."""
    if SL402.code in disabled:
        return []
    message, fix = sl402.measured_fetch(processes, error)
    return process_rule_findings(SL402, severities, message, where, fix=fix)


def suppressions_in(file: str, text: str) -> list[Suppression]:
    """Stage 4: the suppression comments of one file."""
    return RUN_WIDE.run("suppressions", find_suppressions, file, text)


def suppressed(reports: list[TargetReport], run_findings: list[Finding], suppressions: list[Suppression],
               same_file: Callable[[str, str], bool], disabled: frozenset[str], severities: dict[str, Severity],
               report_unused: bool) -> tuple[list[TargetReport], list[Finding]]:
    """Stages 4 and 5: the targets' findings and the run-wide ones without those a suppression silences,
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
