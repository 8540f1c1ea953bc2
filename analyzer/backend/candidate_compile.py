"""A fix candidate's compile: its report, from its text, for its figures only. One owner for lint's fix
checks (fix_checks) and suggest's versions (advice/solver_fixes)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

from ...passes.models.entry import EntrySignature
from ...passes.models.report import TargetReport
from ..adapter import jax_adapter
from ..context.config import Settings
from .cached_analysis import analysis_cache, cached_report, figures_key_parts, placed
from .checked_in_analysis import analyze_text
from .side_by_side import CompileCounter, EntryEdit, compile_side_by_side, known, once


def program_key(name: str, text: str, sig: EntrySignature, settings: Settings, where: str,
                devices: list) -> Hashable:
    """What a candidate's figures depend on within one target's checks: the program XLA compiles, printed
    without its source locations (as the analysis cache keys a candidate: ``figures_key_parts``), the devices
    it is placed on and the settings. Two candidates whose edits give one program (an inserted constraint's
    location aside), or a candidate that is the program as written, are one key."""
    placement = tuple(devices[:sig.num_partitions])
    return name, jax_adapter.text_without_locations(text), placement, repr(settings), where


def as_written_known(report: TargetReport, text: str, sig: EntrySignature, settings: Settings, where: str,
                     devices: list) -> None:
    """Inside ``one_compile_per_program``, a candidate whose program is the one lint compiled (``text``, its
    report ``report``) is measured on that compile, as the checks' baseline is, and not compiled again; a
    report without figures (XLA refused it) is not one."""
    if report.memory is not None:
        known(program_key(report.name, text, sig, settings, where, devices), report)


def compiled_candidate(name: str, text: str, sig: EntrySignature, settings: Settings, where: str,
                       devices: list, edit: EntryEdit | None = None) -> TargetReport:
    """A candidate's report, compiled from its text through the analysis cache (keyed by the program without
    its source locations: only its figures are read). XLA
    writes no dump for it and, on CPU, does not optimize its machine code, and no rule runs on it: a check
    compares XLA's peak, the collectives and the step-time estimate, which need none of them (about half a CPU
    compile's time; the rules about 0.2 s a candidate on the main example). Inside
    ``one_compile_per_program`` a program asked for again (another finding's check, a solver fix's single move:
    ``program_key``) is compiled once; ``edit``: what the candidate changes at the entry, kept for
    ``side_by_side.same_program``."""
    return once(program_key(name, text, sig, settings, where, devices), lambda: cached_report(analysis_cache(settings),
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
