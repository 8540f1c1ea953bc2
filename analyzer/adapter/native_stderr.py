"""Holding back what native code writes straight to file descriptor 2, and reading it.

JAX's CUDA plugin reports "Could not find cuda drivers" when it loads on a
machine without a GPU, on every start, through a C++ logger that Python's
stream redirection cannot reach. That would break the one-line error a user
gets for bad input, so imports and backend start-up run under this guard; what
was held back is written out after all if the guarded code raises.

XLA's SPMD partitioner says through the same logger when it cannot reshard a
value but by replicating it ("Involuntary full rematerialization"): compiles
run under ``capture_native_stderr``, which hands those lines to the analysis and
writes every other line out as it came.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import IO, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def quiet_native_stderr():
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            capture.seek(0)
            os.write(2, capture.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class CapturedStderr:
    """What native code wrote to file descriptor 2 inside ``capture_native_stderr``."""

    text: str = ""
    shared: bool = False  # another capture ran beside this one

    def __init__(self) -> None:
        self.thread = threading.get_native_id()  # the thread it captures for
        self.beside: set[int] = set()  # the threads of the captures that ran beside it

    def own_text(self) -> str | None:
        """The kept lines this capture's thread logged, where every kept line names a capturing thread: XLA's
        logger writes the id of the thread that logs (``W1128 12:32:27.055051   26983 spmd_partitioner.cc...``),
        and where a compile runs on the thread that asked for it (jax 0.12's CPU client), a line of this
        thread's is this compile's and one of another capture's thread is that one's. None where a line names
        another thread (jax 0.10.2 compiles on a pool of its own) or none: whose it is is not known."""
        if not self.shared:
            return self.text
        own = []
        for line in self.text.splitlines(keepends=True):
            logged = _LOGGED_BY.match(line)
            thread = int(logged.group(1)) if logged else None
            if thread == self.thread:
                own.append(line)
            elif thread not in self.beside:
                return None
        return "".join(own)


# absl's prefix: severity, date, time, thread id, file:line.
_LOGGED_BY = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+(\d+) ")


class _Shared:
    """The one redirection of fd 2 that every capture running at once shares (compiles side by side, one
    thread each: a redirection of its own per thread would restore fd 2 out of order). Each capture reads
    what was written between its start and its end; lines it does not keep are written out at each start
    and end of any capture, so a progress line printed between two compiles is not held back until the
    last of them ends."""

    def __init__(self):
        self.changed = threading.Condition()
        self.active: list[CapturedStderr] = []
        self.alone = False  # a capture that must be the only one (capture_native_stderr's ``alone``)
        self.file: IO[bytes] | None = None
        self.saved = -1
        self.forwarded = 0  # bytes of the file already written out or kept

    def size(self) -> int:
        sys.stderr.flush()
        assert self.file is not None
        return os.fstat(self.file.fileno()).st_size

    def region(self, start: int, end: int) -> bytes:
        assert self.file is not None
        return os.pread(self.file.fileno(), end - start, start)

    def forward(self, keep: Callable[[str], bool], everything: bool = False) -> None:
        """Write out the lines no capture keeps, from where the last call stopped to the last whole line
        (to the end, ``everything``)."""
        written = self.region(self.forwarded, self.size())
        if not everything:
            written = written[:written.rfind(b"\n") + 1]
        self.forwarded += len(written)
        lines = written.decode("utf-8", "replace").splitlines(keepends=True)
        rest = "".join(line for line in lines if not keep(line))
        if rest:
            os.write(self.saved, rest.encode("utf-8", "replace"))


_SHARED = _Shared()


@contextlib.contextmanager
def capture_native_stderr(keep: Callable[[str], bool], alone: bool = False):
    """Hold back what native code writes to fd 2 (XLA's own warnings during a compile); the lines
    ``keep`` accepts are returned in ``.text`` instead of printed, every other line is written out
    as it came. Captures on several threads at once share one redirection, and each reads every
    line written while it ran: ``.shared`` says another ran beside it (whose the lines are is then not
    known); with ``alone`` it waits until no other runs and runs by itself."""
    captured = CapturedStderr()
    shared = _SHARED
    start = 0
    with shared.changed:
        shared.changed.wait_for(lambda: not shared.alone and not (alone and shared.active))
        if not shared.active:
            try:
                shared.saved = os.dup(2)
            except OSError:
                shared.saved = -1
        if shared.saved < 0:  # no fd 2 to redirect: nothing is captured
            start = -1
        elif not shared.active:
            sys.stderr.flush()
            shared.file = tempfile.TemporaryFile()
            shared.forwarded = 0
            os.dup2(shared.file.fileno(), 2)
        if start == 0:
            shared.forward(keep)
            start = shared.size()
            for other in shared.active:
                other.shared = captured.shared = True
                other.beside.add(captured.thread)
                captured.beside.add(other.thread)
            shared.active.append(captured)
            shared.alone = alone
    if start < 0:
        yield captured
        return
    try:
        yield captured
    finally:
        with shared.changed:
            end = shared.size()
            lines = shared.region(start, end).decode("utf-8", "replace").splitlines(keepends=True)
            captured.text = "".join(line for line in lines if keep(line))
            shared.active.remove(captured)
            shared.forward(keep, everything=not shared.active)
            if not shared.active:
                os.dup2(shared.saved, 2)
                os.close(shared.saved)
                assert shared.file is not None
                shared.file.close()
                shared.file = None
            shared.alone = False
            shared.changed.notify_all()


def compiled_with_warnings(compile_program: Callable[[], T], keep: Callable[[str], bool],
                           warnings_only: Callable[[], object] | None = None) -> tuple[T, str]:
    """``compile_program()``'s result and the lines ``keep`` accepts that native code wrote while it ran.
    A compile that ran beside another and saw such lines takes those its own thread logged
    (``CapturedStderr.own_text``); where that is not known, it is run again by itself, as
    ``warnings_only`` where given (a compile that gives the same lines for less: its result is not read, the
    first compile's is returned), for the lines: they may be the other's (the partitioner's warnings name no
    program)."""
    with capture_native_stderr(keep) as warned:
        result = compile_program()
    if not (warned.shared and warned.text):
        return result, warned.text
    own = warned.own_text()
    if own is not None:
        return result, own
    with capture_native_stderr(keep, alone=True) as warned:
        if warnings_only is None:
            result = compile_program()
        else:
            warnings_only()
    return result, warned.text
