"""Compiling ``suggest``'s versions of a target (the solver's plans, the written shardings,
the replicated, data-parallel and FSDP baselines): each is StableHLO text with its own
argument and result shardings, compiled and measured. They are independent, so with
``--jobs`` or ``--executor ray`` each is written to a file of its own and analysed as a
checked-in program (executors/checked_in_tasks.py); in this process otherwise. Either way
each goes through the analysis cache."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ....passes.models.report import TargetReport
from ....passes.models.suggest import Version
from ...adapter import jax_adapter
from ...backend.advice.verdict import VersionText, measured_version
from ...backend.cached_analysis import analysis_cache, cached_report, key_parts, placed
from ...backend.checked_in_analysis import analyze_text
from ...backend.side_by_side import CompileCounter, outcome, shortened
from ...context.config import Settings
from ...errors import ShardLintInputError
from ...executors.checked_in_tasks import Spread, check_paths
from ...inputs.files import is_plain_file_name
from ...supervision import isolation


def compile_versions(target: str, num_partitions: int, versions: list[VersionText], settings: Settings, devices,
                     where: str, spread: Spread) -> list[tuple[Version, TargetReport | None]]:
    """Each version measured (or its compile error), in the order given. Versions with the same text (a
    baseline that is the written layout, a single move that is a baseline) are one compile."""
    first: dict[str, int] = {}
    unique: list[VersionText] = []
    for v in versions:
        if v.text not in first:
            first[v.text] = len(unique)
            unique.append(v)
    measured = _compile_unique(target, num_partitions, unique, settings, devices, where, spread)
    return [(version.model_copy(update={"name": v.name, "description": v.description}), report)
            for v in versions for version, report in [measured[first[v.text]]]]


def _compile_unique(target: str, num_partitions: int, versions: list[VersionText], settings: Settings, devices,
                    where: str, spread: Spread) -> list[tuple[Version, TargetReport | None]]:
    # A target whose name cannot name a file is compiled in this process.
    if spread.executor.in_process or len(versions) < 2 or not is_plain_file_name(target):
        say = spread.say or (lambda _msg: None)
        labels = version_labels(versions)
        measured = []
        for k, v in enumerate(versions):
            say(f"[{k + 1}/{len(versions)}] {target}: compiling {labels[k]}")
            measured.append(_compile_here(target, num_partitions, v, settings, devices, where))
        return measured
    folder = tempfile.mkdtemp(prefix="jax-shard-lint-versions-")
    try:
        paths = []
        for k, v in enumerate(versions):
            # One folder per version: the file's name is the target's, as a checked-in program's is.
            path = os.path.join(folder, f"{k}-{v.name}", f"{target}.mlir")
            os.makedirs(os.path.dirname(path))
            with open(path, "w", encoding="utf-8") as f:
                f.write(v.text)
            paths.append(path)
        isolation.phase(where, f"compiling {len(versions)} versions of target {target!r}")
        results = check_paths(paths, settings, spread, what="compiled", figures_only=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return [measured_version(v, r.reports[0] if r.reports else None, r.error, settings)
            for v, r in zip(versions, results)]


def _compile_here(target: str, num_partitions: int, v: VersionText, settings: Settings, devices,
                  where: str) -> tuple[Version, TargetReport | None]:
    isolation.phase(where, f"compiling the {v.name} version of target {target!r}")
    pool = devices if devices is not None else jax_adapter.cpu_devices()
    # A version is read for XLA's peak, its collectives and its step time: XLA writes no dump for it (no
    # buffer assignment or live ranges, as lint's fix checks compile theirs) and no rule runs on it (the
    # report has no findings), so it is a cache entry of its own kind, never taken for a checked-in
    # program's full report.
    try:
        report = cached_report(analysis_cache(settings),
                               lambda: key_parts("suggest-version", target, v.text, settings,
                                                 placed(pool, num_partitions)),
                               lambda: analyze_text(target, v.text, settings, where, devices=devices,
                                                    with_reports=False, optimize_machine_code=False,
                                                    with_rules=False)[0])
    except ShardLintInputError as e:
        return measured_version(v, None, e.problem, settings)
    return measured_version(v, report, None, settings)


class SideBySide:
    """Versions of one target compiled in this process, side by side (a thread per core: XLA releases the
    GIL while it compiles), each text once. Started before they are read: the written program, the
    baselines and the single moves do not depend on the solve, so they compile while the solver runs."""

    def __init__(self, pool: ThreadPoolExecutor, target: str, num_partitions: int, settings: Settings, devices,
                 where: str, say):
        self.pool, self.target, self.num_partitions = pool, target, num_partitions
        self.settings, self.devices, self.where = settings, devices, where
        self.progress = HeldProgress(say) if say is not None else None
        self.counter = CompileCounter(self.progress, target)
        self.futures: dict[str, Future] = {}

    def start(self, versions: list[VersionText], what: str) -> None:
        new: dict[str, VersionText] = {}
        for v in versions:
            if v.text not in self.futures:
                new.setdefault(v.text, v)
        done = self.counter.announce(version_labels(list(new.values())), what)
        for (text, v), then in zip(new.items(), done):
            job = functools.partial(_compile_here, self.target, self.num_partitions, v, self.settings, self.devices,
                                    self.where)
            self.futures[text] = self.pool.submit(outcome, job, then)

    def finished(self) -> tuple[int, int]:
        """(compiles done, compiles started)."""
        return sum(f.done() for f in self.futures.values()), len(self.futures)

    def measured(self, versions: list[VersionText]) -> list[tuple[Version, TargetReport | None]]:
        """Each version's figures (started here if it was not), in the order given, named as given."""
        self.start(versions, "to compare")
        out = []
        for v in versions:
            got = self.futures[v.text].result()
            if isinstance(got, BaseException):
                raise got
            version, report = got
            out.append((version.model_copy(update={"name": v.name, "description": v.description}), report))
        return out


def version_labels(versions: list[VersionText]) -> list[str]:
    """Each version's name in a progress line; where several share a name (the single moves, the solver's
    plans), what tells them apart: the move's own description, shortened to keep the layout it moves to
    (``side_by_side.shortened``), or, where two would still read alike, the version's number."""
    names = [v.name for v in versions]
    short = [shortened(v.description, 60) if v.description else "" for v in versions]
    labels, seen = [], dict.fromkeys(names, 0)
    for v, s in zip(versions, short):
        seen[v.name] += 1
        if names.count(v.name) == 1:
            labels.append(f"the {v.name} version")
        elif s and [t for w, t in zip(versions, short) if w.name == v.name].count(s) == 1:
            labels.append(f"the {v.name} version ({s})")
        else:
            labels.append(f"the {v.name} version ({seen[v.name]} of {names.count(v.name)})")
    return labels


class SolveHeartbeat:
    """While the solver runs (HiGHS reports nothing until it returns: minutes on a large problem), a line every
    ``every`` seconds saying so, with the count of compiles done beside it. Printed at once, not held: it says
    only that the solve is running, which is true whether or not it then refuses a budget."""

    def __init__(self, say: Callable[[str], None] | None, name: str, side_by_side: SideBySide | None,
                 every: float = 15.0):
        self.say, self.name, self.side_by_side, self.every = say, name, side_by_side, every
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _beat(self) -> None:
        waited = 0.0
        while not self.stop.wait(self.every):
            waited += self.every
            line = f"{self.name}: still solving ({waited:.0f} s)"
            if self.side_by_side is not None:
                done, started = self.side_by_side.finished()
                if started:
                    line += f"; {done}/{started} compiles beside it done"
            if self.say is not None:
                self.say(line)

    def __enter__(self) -> SolveHeartbeat:
        if self.say is not None:
            self.thread = threading.Thread(target=self._beat, name="suggest-solve-heartbeat", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


class HeldProgress:
    """The progress lines of the compiles started beside the solve, held until the solve has a plan
    (``release``): a budget or an option the solve refuses is still the one line a failing command
    writes, not the counter of compiles it abandons (``drop``)."""

    def __init__(self, say: Callable[[str], None]):
        self.say: Callable[[str], None] | None = say
        self.held: list[str] | None = []  # None once released
        self.lock = threading.Lock()

    def __call__(self, msg: str) -> None:
        with self.lock:
            if self.held is not None:
                self.held.append(msg)
                return
            say = self.say
        if say is not None:
            say(msg)

    def release(self) -> None:
        # Under the lock: a compile finishing meanwhile waits, so its line follows the held ones.
        with self.lock:
            held, self.held = self.held or [], None
            for msg in held:
                if self.say is not None:
                    self.say(msg)

    def drop(self) -> None:
        with self.lock:
            self.held, self.say = None, None
