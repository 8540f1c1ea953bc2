"""Holding back what native code writes straight to file descriptor 2.

JAX's CUDA plugin reports "Could not find cuda drivers" when it loads on a
machine without a GPU, on every start, through a C++ logger that Python's
stream redirection cannot reach. That would break the one-line error a user
gets for bad input, so imports and backend start-up run under this guard; what
was held back is written out after all if the guarded code raises.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


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
