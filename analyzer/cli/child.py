"""The supervised child's entry point: ``python -P -m jax_shard_lint.analyzer.cli.child``.

It takes the status pipe and the parent's streams, watches the lifeline (the
parent's death ends it, with what it started and its scratch folder), runs the
command and reports its exit code. See supervisor.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading

from ..supervision import isolation
from ..supervision.isolation import (
    LIFELINE_FD_ENV,
    SCRATCH_PREFIX,
    STATUS_FD_ENV,
    STREAMS_ENV,
    send_status,
    signal_groups,
)


def _watch_lifeline(fd: int) -> None:
    """Block until the parent is gone (end of file on the lifeline), then end
    everything this child started and the child itself. Runs on a daemon
    thread: XLA releases the GIL while it compiles, so this runs then too."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    signal_groups(isolation.started_groups(), signal.SIGKILL)
    scratch = os.environ.get("TMPDIR", "")
    if os.path.basename(scratch).startswith(SCRATCH_PREFIX):
        shutil.rmtree(scratch, ignore_errors=True)
    os._exit(128 + signal.SIGKILL)


def _child_streams() -> None:
    """sys.stdout/sys.stderr onto the parent's own streams, passed as extra
    descriptors; descriptors 1 and 2 stay on the capture file for native writes."""
    out_fd, err_fd = (int(x) for x in os.environ.pop(STREAMS_ENV).split(","))
    encoding = sys.stdout.encoding or "utf-8"
    sys.stdout = open(out_fd, "w", encoding=encoding, errors="backslashreplace", closefd=True,
                      buffering=1 if os.isatty(out_fd) else -1)
    sys.stderr = open(err_fd, "w", encoding=sys.stderr.encoding or encoding, errors="backslashreplace",
                      closefd=True, buffering=1)


def child_main(argv: list[str]) -> None:
    lifeline = int(os.environ.pop(LIFELINE_FD_ENV))
    threading.Thread(target=_watch_lifeline, args=(lifeline,), name="jax-shard-lint-lifeline", daemon=True).start()
    isolation.open_status_pipe(int(os.environ.pop(STATUS_FD_ENV)))
    _child_streams()
    from .main import run_command

    try:
        code = run_command(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): as a shell reports SIGPIPE
        code = 128 + signal.SIGPIPE
    except BaseException as e:  # SystemExit from argparse, or a bug: still one status
        code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 3
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    send_status({"exit": code})
    isolation.close_status_pipe()
    # os._exit: a script's non-daemon thread or atexit hook cannot keep the process alive.
    os._exit(code)


if __name__ == "__main__":
    child_main(sys.argv[1:])
