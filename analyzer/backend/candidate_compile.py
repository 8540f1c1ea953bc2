"""A fix candidate's compile: its report, from its text, for its figures only. One owner for lint's fix
checks (fix_checks) and suggest's versions (advice/solver_fixes)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ...passes.models.entry import EntrySignature
from ...passes.models.report import TargetReport
from ..context.config import Settings
from .cached_analysis import analysis_cache, cached_report, figures_key_parts, placed
from .checked_in_analysis import analyze_text
from .side_by_side import CompileCounter, EntryEdit, compile_side_by_side, once


def compiled_candidate(name: str, text: str, sig: EntrySignature, settings: Settings, where: str,
                       devices: list, edit: EntryEdit | None = None) -> TargetReport:
    """A candidate's report, compiled from its text through the analysis cache (keyed by the program without
    its source locations: only its figures are read). XLA
    writes no dump for it and, on CPU, does not optimize its machine code, and no rule runs on it: a check
    compares XLA's peak, the collectives and the step-time estimate, which need none of them (about half a CPU
    compile's time; the rules about 0.2 s a candidate on the main example). Inside
    ``one_compile_per_program`` a text asked for again (another finding's check, a solver fix's single move)
    is compiled once; ``edit``: what the candidate changes at the entry, kept for ``side_by_side.same_program``."""
    placement = tuple(devices[:sig.num_partitions])
    return once((name, text, placement, repr(settings), where), lambda: cached_report(analysis_cache(settings),
                         lambda: figures_key_parts("fix-candidate", name, text, settings,
                                                   placed(devices, sig.num_partitions)),
                         lambda: analyze_text(name, text, settings, where, devices=devices, with_reports=False,
                                              optimize_machine_code=False, with_rules=False)[0]), edit)


def compiled_beside_written(report: TargetReport, text: str, candidates: list[tuple[str, str]], sig: EntrySignature,
                            settings: Settings, where: str, devices: list, progress: Callable[[str], None] | None,
                            ) -> tuple[TargetReport, list[TargetReport | BaseException]]:
    """(the program as written, each candidate's outcome): ``candidates`` (label, text) compiled side by side.
    The program as written is the report's own compile, compiled again only where XLA refused it there (no
    figures), beside the candidates; what that compile raised is raised."""
    as_written = [] if report.memory is not None else [text]
    labels = ["the program as written"] * len(as_written) + [label for label, _ in candidates]
    compiled = compile_side_by_side(
        [functools.partial(compiled_candidate, report.name, t, sig, settings, where, devices)
         for t in as_written + [t for _, t in candidates]],
        CompileCounter(progress, report.name).announce(labels))
    before = compiled.pop(0) if as_written else report
    if isinstance(before, BaseException):
        raise before
    return before, compiled
