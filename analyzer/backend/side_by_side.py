"""Compiles that do not depend on each other, run side by side: XLA releases the GIL while it
compiles, so a thread per core compiles every fix candidate at once (fix_checks.py). Each outcome
is kept, report or exception, and read in the jobs' order.

Within one target's fix checks (``one_compile_per_program``), a program asked for twice is
compiled once: the checks of different findings often arrive at the same program (SL203's own
suggestion after the state fixes is the solver fixes' first single move on the main example), and
a second compile of the same text on the same devices measures the same figures."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from ...passes.common.sharding_text import normalized
from ...passes.models.entry import EntrySignature
from ...passes.models.report import TargetReport
from ..cache.analysis_cache import thread_reads
from . import compile_memo

T = TypeVar("T")  # what a job returns: a candidate's report, or suggest's (version, report)


def compile_side_by_side(jobs: list[Callable[[], T]], done: list[Callable[[], None]]) -> list[T | BaseException]:
    """Each job's report, or what it raised, in the jobs' order; up to one compile per core at a time.
    ``done[k]`` is called when job k finishes."""
    if len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return [outcome(job, then) for job, then in zip(jobs, done)]
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), thread_name_prefix="fix-check") as pool:
        return list(pool.map(outcome, jobs, done))


@contextlib.contextmanager
def compile_pool(jobs: int) -> Iterator[ThreadPoolExecutor | None]:
    """A pool of up to one compile per core for ``jobs`` compiles and more asked for while they run (a
    second choice the first outcomes already call for), or None where ``compile_side_by_side`` runs them
    in turn (one job, one core)."""
    if jobs < 2 or (os.cpu_count() or 1) < 2:
        yield None
        return
    with ThreadPoolExecutor(max_workers=min(jobs, os.cpu_count() or 1), thread_name_prefix="fix-check") as pool:
        yield pool


# The analysis cache's reads on this thread when its job began: the job's own reads tell a compile from a
# program read from the cache.
_job = threading.local()


def outcome(job: Callable[[], T], done: Callable[[], None]) -> T | BaseException:
    outer, _job.reads_before = getattr(_job, "reads_before", None), thread_reads()
    try:
        # The compile log names the stage and the candidate announced on the thread that asked for it.
        with compile_memo.described(**getattr(done, "purpose", {})):
            return job()
    except Exception as e:  # handed to the loop that reads the outcomes in order, which raises or reports it
        return e
    finally:
        done()
        _job.reads_before = outer  # a job run inside another job's: the outer one's start again


class CompileCounter:
    """Tells ``progress`` of each fix-check compile as it finishes, counted within the batch it was announced in
    ("[2/3] NAME: compiled params['w'] -> P(None, 'tp')", or "read from the cache:" where the analysis cache held
    it): a batch's total is fixed when it is announced, so a second batch the checks ask for later (a second
    choice, the solver's plans once it returns) counts on its own and never changes the first's total. The labels
    of a batch are shortened to lines that still tell them apart (``distinct_labels``)."""

    def __init__(self, progress: Callable[[str], None] | None, name: str):
        self.progress, self.name = progress, name
        self.lock = threading.Lock()

    def announce(self, labels: list[str], what: str = "to check the fixes") -> list[Callable[[], None]]:
        """One callback per label, for when its compile is done."""
        shown = distinct_labels(labels)
        batch = [0, len(labels)]  # finished, total: this announcement's
        with self.lock:
            if self.progress is not None and labels:
                self.progress(f"[0/{len(labels)}] {self.name}: compiling {len(labels)} "
                              f"program{'s' if len(labels) > 1 else ''} {what}: " + announced(shown))
        return [self._done_callback(label, batch) for label in shown]

    def same(self, label: str) -> None:
        """Says a candidate is not compiled, being a program compiled before (``same_program``); not counted in
        any announcement's total ("[same]": a counted step's bracket, so a log prints it at once)."""
        with self.lock:
            if self.progress is not None:
                self.progress(f"[same] {self.name}: not compiled, the same program as one compiled before: "
                              f"{shortened(label)}")
        with compile_memo.described(candidate=shortened(label)):
            compile_memo.log_reuse()

    def _done_callback(self, label: str, batch: list[int]) -> Callable[[], None]:
        def done() -> None:
            how = "read from the cache:" if _read_from_cache() else "compiled"
            with self.lock:
                batch[0] += 1
                if self.progress is not None:
                    self.progress(f"[{batch[0]}/{batch[1]}] {self.name}: {how} {label}")

        # Read by ``outcome`` on the thread that compiles it, for the compile log (compile_memo.described).
        done.purpose = {**compile_memo.current_purpose(), "candidate": label}  # type: ignore[attr-defined]
        return done


def _read_from_cache() -> bool:
    """Whether the job ``outcome`` just ran on this thread read its program from the analysis cache (a hit,
    and no miss that compiled), so its progress line does not say a 0.1 s read was compiled."""
    before = getattr(_job, "reads_before", None)
    if before is None:
        return False
    hits, misses = thread_reads()
    return hits > before[0] and misses == before[1]


def announced(labels: list[str], width: int = 100) -> str:
    """The labels of the compiles one announce line starts: all of them where they fit in ``width``; else
    those that share a name before their parenthesis (suggest's 8 single moves, its 6 plans) as one entry
    with their count, up to twice ``width``; else none (the count is in the line already). Each is named
    again on its own line when its compile is done."""
    whole = "; ".join(labels)
    if len(whole) <= width:
        return whole
    counts: dict[str, int] = {}
    for label in labels:
        version = _VERSION.match(label)
        name = version.group(1) if version else label
        counts[name] = counts.get(name, 0) + 1
    grouped = "; ".join(name if n == 1 else f"{n} {name.removeprefix('the ')}s" if _VERSION.match(name)
                        else f"{name} (x{n})" for name, n in counts.items())
    return grouped if len(grouped) <= 2 * width else "each named below when it is compiled"


# suggest's versions: "the single move version (params['embed']: P() -> P('tp'))", "the solver version (2 of 6)".
_VERSION = re.compile(r"^(the [\w\- ]+ version)(?: \(.*\))?$")


def shortened(label: str, width: int = 90) -> str:
    """A label on a progress line: a move of an argument and its optimizer state names every path (a Llama's
    46 run to thousands of characters); the paths are cut, and the layout they move to (after the last
    " -> ") and what the candidate is ("(move 0)") kept whole. A path is never cut in a key: where the first
    does not fit, its middle keys are left out and its last ones kept (``params…['Dense_0']['kernel']``), as
    those tell one layer's weight from another's."""
    if len(label) <= width:
        return label
    at = label.rfind(" -> ")
    if at < 0:
        tail = width // 3
        return label[:width - tail - 3].rstrip() + " … " + label[-tail:].lstrip()
    head, rest = label[:at], label[at:]
    room = max(width - len(rest), 30)
    # Whole paths, as many as fit, then how many more ("params['embed'] and 2 more -> P('tp')").
    ends = [m.start() for m in re.finditer(r", | with ", head)] + [len(head)]
    fit = [e for e in ends if e + 12 <= room]
    if fit:
        more = len(ends) - len(fit)
        text = head[:fit[-1]] + (f" and {more} more" if more else "") + rest
    else:
        more_text = f" and {len(ends) - 1} more" if len(ends) > 1 else ""
        text = _elided(head[:ends[0]], room - len(more_text)) + more_text + rest
    return text if len(text) <= width else text[:width - 1].rstrip(", ") + "…"


def _elided(path: str, room: int) -> str:
    """``path`` in ``room`` characters: its root and as many of its last keys as fit, whole, the middle left out."""
    if len(path) <= room:
        return path
    tokens = re.findall(r"\[[^\]]*\]|\.\w+|[^\[.]+", path)
    root, kept = tokens[0], list[str]()
    for token in reversed(tokens[1:]):
        if len(root) + 1 + len(token) + sum(len(k) for k in kept) > room:
            break
        kept.insert(0, token)
    return root + "…" + "".join(kept) if kept else path[:max(room - 1, 1)] + "…"


def distinct_labels(labels: list[str], width: int = 90) -> list[str]:
    """Each label ``shortened``, wider where two different labels would read the same (up to whole): one line
    per candidate, never two alike for two programs."""
    shown = [shortened(label, width) for label in labels]
    while width < max(map(len, labels), default=0):
        alike = {s for s in shown if sum(t == s for t in shown) > 1}
        clashing = [k for k, s in enumerate(shown) if s in alike and labels.count(labels[k]) < shown.count(s)]
        if not clashing:
            break
        width *= 2
        for k in clashing:
            shown[k] = shortened(labels[k], width)
    return shown


_programs_lock = threading.Lock()
# Program key -> its compile's outcome, while a target's fix checks run (None: not inside one).
_programs: dict[Hashable, Future] | None = None
# The candidates compiled so far in that scope, each with what it changes at the entry (``EntryEdit``) and its report.
_entries: list[tuple[EntryEdit, TargetReport]] | None = None


@dataclass(frozen=True)
class EntryEdit:
    """What a candidate changes in the program as written, at its entry: each argument's new sharding, each
    result's pinned sharding (only those the module does not state already, normalized to the value's rank)
    and the arguments donated."""
    arguments: frozenset[tuple[int, Spec]]
    results: frozenset[tuple[int, Spec]]
    donors: frozenset[int]


Spec = tuple[tuple[str, ...], ...] | None


def entry_edit(sig: EntrySignature, arguments: dict[int, list[list[str]]], results: dict[int, list[list[str]]],
               donors: frozenset[int] = frozenset()) -> EntryEdit:
    """The candidate's ``EntryEdit``: an edit to the sharding the module already states is no change."""
    def changed(values, edits) -> frozenset[tuple[int, Spec]]:
        out = set()
        for i, spec in edits.items():
            rank = len(values[i].shape)
            if normalized(spec, rank) != (None if values[i].sharding is None else normalized(values[i].sharding, rank)):
                out.add((i, normalized(spec, rank)))
        return frozenset(out)

    return EntryEdit(changed(sig.inputs, arguments), changed(sig.outputs, results),
                     frozenset(donors))


def finished(report: TargetReport) -> Future:
    """A future already holding ``report`` (a program compiled before, read where compiles' futures are)."""
    future: Future = Future()
    future.set_result(report)
    return future


def remember(edit: EntryEdit, report: TargetReport) -> None:
    """Keeps a compiled candidate's report for ``same_program`` while a target's fix checks run."""
    with _programs_lock:
        if _entries is not None:
            _entries.append((edit, report))


def same_program(edit: EntryEdit) -> TargetReport | None:
    """A candidate compiled before (``remember``) whose program this one is: the same arguments' shardings and
    donations, and results pinned only to the shardings that compile returned them in (XLA compiles such a
    pin to the same program: on the main example the solver fixes' "layout the step returns them in" and the
    state fix "in_shardings giving each state input the layout the step returns it in" compile to one
    optimized HLO, instruction numbers aside). Its report serves a candidate whose figures only decide which
    one is printed; a printed one is compiled itself."""
    pinned = dict(edit.results)
    with _programs_lock:
        entries = list(_entries or [])
    for other, report in entries:
        if other.arguments != edit.arguments or other.donors != edit.donors or not other.results <= edit.results:
            continue
        outputs = {t.index: t for t in report.outputs}
        if all(i in outputs and outputs[i].sharding is not None
               and normalized(outputs[i].sharding, len(outputs[i].shape)) == spec
               for i, spec in pinned.items() if (i, spec) not in other.results):
            return report
    return None


@contextlib.contextmanager
def one_compile_per_program() -> Iterator[None]:
    """Inside it, ``once`` compiles each program (by its key) once; outside, every time."""
    global _programs, _entries
    with _programs_lock:
        outer, _programs = _programs, ({} if _programs is None else _programs)
        outer_entries, _entries = _entries, ([] if _entries is None else _entries)
    try:
        yield
    finally:
        with _programs_lock:
            _programs, _entries = outer, outer_entries


def known(key: Hashable, report: TargetReport) -> None:
    """Inside ``one_compile_per_program``, ``once`` of ``key`` gives ``report`` (a program compiled before
    the checks: lint's own) without computing it; outside, nothing."""
    with _programs_lock:
        if _programs is not None:
            _programs.setdefault(key, finished(report))


def once(key: Hashable, job: Callable[[], TargetReport], edit: EntryEdit | None = None) -> TargetReport:
    """``job()``'s report (or what it raised), computed once per key inside ``one_compile_per_program``:
    a second caller, on this thread or another, waits for the first one's compile. ``edit``: what the program
    changes at the entry, its report kept for ``same_program``."""
    with _programs_lock:
        if _programs is None:
            first, future = True, None
        else:
            future = _programs.get(key)
            first = future is None
            if first:
                future = _programs[key] = Future()
    if future is None:
        return job()
    if first:
        try:
            future.set_result(job())
        except BaseException as e:  # the same error for every caller of this program
            future.set_exception(e)
        else:
            if edit is not None:
                remember(edit, future.result())
    else:
        compile_memo.log_reuse()
    return future.result()
