"""The analysis cache: a target's finished report (or ``fit``'s figures for a probe, or what the tool reads from one
XLA compile: the compile memo, backend/compile_memo.py, in a folder of its own inside), kept on disk under a key made of
everything the report depends on, so that ``gate``, ``lint``, ``check``, ``sweep``,
``snapshot``, ``fit`` and ``suggest`` do not compile a program they have already analysed.

What is stored is the report model itself, not XLA's executable: JAX's persistent
compilation cache returns an executable without the buffer-assignment and
live-range dumps the memory pass reads (a cache hit writes no dumps), so it cannot
stand in for a compile here, and the tool's own cache holds what the report needs.

A hit is never stale: the key (cache_key.py) covers the lowered program's text with
its source locations, the platform and its devices, the settings, the working
directory the report's paths are shown against, the tool's own source, and the
versions of every compiler; any part changing is a miss. An entry that cannot be
read back (cut short, edited, from another format) is ignored and rewritten.
Writes go to a temporary file renamed into place, so concurrent runs (``sweep
--jobs``, parallel CI jobs, Ray workers sharing a folder) never read half an entry.
While an entry is computed its own lock file is held (``computing``): another process
or thread asking for the same key waits and reads the entry instead of compiling the
same program beside it; different entries are computed side by side.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

Stored = TypeVar("Stored", bound=BaseModel)

# Bumped when the layout of an entry changes; older entries are then misses.
ENTRY_FORMAT: Final = 1
# Entries beyond this many are removed, least recently used first, when one is written.
MAX_ENTRIES: Final = 4096
ENTRY_SUFFIX: Final = ".json"
LOCK_SUFFIX: Final = ".lock"
# The longest a run waits for another's computing of an entry before computing it itself: a guard against a
# holder that hangs (a process that dies releases its lock at once), longer than any one compile takes.
LOCK_WAIT_S: Final = 900.0
_LOCK_POLL_S: Final = 0.1

try:
    import fcntl
except ImportError:  # no flock (Windows): entries are computed without waiting for one another
    fcntl = None  # type: ignore[assignment]

# The keys this thread is computing: an entry asked for again inside its own computation is computed, not waited
# for (its lock is this thread's).
_computing = threading.local()


# Every cache's reads on this thread, hits and misses: a progress line says a program was read from the cache
# rather than compiled when its job's reads all hit (side_by_side.py).
_thread_reads = threading.local()


def thread_reads() -> tuple[int, int]:
    """(hits, misses) of every cache's ``get`` on this thread so far."""
    return getattr(_thread_reads, "hits", 0), getattr(_thread_reads, "misses", 0)


def _count_on_thread(hits: int = 0, misses: int = 0) -> None:
    _thread_reads.hits = getattr(_thread_reads, "hits", 0) + hits
    _thread_reads.misses = getattr(_thread_reads, "misses", 0) + misses


@dataclass(frozen=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0


class AnalysisCache:
    """Reports by key in ``folder/v{ENTRY_FORMAT}/ab/abcdef....json``."""

    def __init__(self, folder: str, max_entries: int | None = None):
        self.folder = os.path.join(os.path.abspath(folder), f"v{ENTRY_FORMAT}")
        self.max_entries = MAX_ENTRIES if max_entries is None else max_entries
        self.hits = self.misses = self.corrupt = 0

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key + ENTRY_SUFFIX)

    def get(self, key: str, model: type[Stored]) -> Stored | None:
        """The stored ``model`` (a TargetReport, or fit's probe figures) under ``key``, or None."""
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                entry = json.load(f)
            if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or entry.get("key") != key \
                    or entry.get("model") != model.__name__:
                raise ValueError("not an entry of this format, key and model")
            report = model.model_validate(entry["report"])
        except FileNotFoundError:
            self.misses += 1
            _count_on_thread(misses=1)
            return None
        except (OSError, ValueError, KeyError, TypeError, ValidationError, RecursionError):
            # Cut short by a crash, edited by hand, written by another release: a miss, rewritten after the compile.
            self.corrupt += 1
            self.misses += 1
            _count_on_thread(misses=1)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        self.hits += 1
        _count_on_thread(hits=1)
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: eviction removes the least recently used first
        return report

    def written_meanwhile(self, key: str, model: type[Stored]) -> Stored | None:
        """The entry under ``key`` when another run wrote it after ``get`` missed it (while this one waited for
        ``computing``): a hit instead of that miss."""
        if not self.has(key):
            return None
        stored = self.get(key, model)
        self.misses -= 1  # read again: a hit, or (unreadable) the miss already counted
        _count_on_thread(misses=-1)
        return stored

    @contextlib.contextmanager
    def computing(self, key: str) -> Iterator[None]:
        """Held while the entry under ``key`` is computed and written: one lock file per entry, removed when the
        entry is written. A folder it cannot be made in, or a key this thread is already computing, is computed
        without it."""
        held = _computing.__dict__.setdefault("keys", set())
        path = self._path(key)[: -len(ENTRY_SUFFIX)] + LOCK_SUFFIX
        if fcntl is None or key in held:
            yield
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            lock = open(path, "a")  # noqa: SIM115 - held across the yield
        except OSError:
            yield
            return
        with lock:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # computed beside the holder rather than never
                    time.sleep(_LOCK_POLL_S)
            held.add(key)
            try:
                yield
            finally:
                held.discard(key)
                with contextlib.suppress(OSError):
                    os.unlink(path)  # before its release: a run that opens it next finds the entry written

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (read by ``get``; counted by neither)."""
        return os.path.isfile(self._path(key))

    def put(self, key: str, report: BaseModel, described: dict[str, object]) -> None:
        """Store ``report``; ``described`` (the key's parts, without the program text) is kept
        beside it for a person reading the folder. A cache that cannot be written costs the
        next run a compile, never this one its report."""
        path = self._path(key)
        entry = {"format": ENTRY_FORMAT, "key": key, "model": type(report).__name__, "parts": described,
                 "report": json.loads(report.model_dump_json())}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=ENTRY_SUFFIX, dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(entry, f, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
        self._evict()

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.corrupt)

    def _evict(self) -> None:
        try:
            entries = [os.path.join(d.path, e.name) for d in os.scandir(self.folder) if d.is_dir()
                       for e in os.scandir(d.path) if e.name.endswith(ENTRY_SUFFIX) and not e.name.startswith(".")]
        except OSError:
            return
        if len(entries) <= self.max_entries:
            return

        def last_used(path: str) -> float:
            try:
                return os.stat(path).st_mtime
            except OSError:
                return 0.0

        for path in sorted(entries, key=last_used)[: len(entries) - self.max_entries]:
            with contextlib.suppress(OSError):
                os.unlink(path)


def default_cache_folder() -> str:
    """``$JAX_SHARD_LINT_CACHE_DIR``, else the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    explicit = os.environ.get("JAX_SHARD_LINT_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jax-shard-lint")
