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
import sys
import tempfile
from collections.abc import Callable


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


@contextlib.contextmanager
def capture_native_stderr(keep: Callable[[str], bool]):
    """Hold back what native code writes to fd 2 (XLA's own warnings during a compile); the lines
    ``keep`` accepts are returned in ``.text`` instead of printed, every other line is written out
    afterwards as it came."""
    captured = CapturedStderr()
    try:
        saved = os.dup(2)
    except OSError:
        yield captured
        return
    with tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
            lines = text.splitlines(keepends=True)
            captured.text = "".join(line for line in lines if keep(line))
            rest = "".join(line for line in lines if not keep(line))
            if rest:
                os.write(2, rest.encode("utf-8", "replace"))
