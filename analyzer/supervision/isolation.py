"""The child side of supervision: what the command tells its supervising parent
on the status pipe (the file and phase it is working on, the process groups it
started, its exit code). Everything here is a no-op in process (tests, the
parent itself, ``JAX_SHARD_LINT_IN_PROCESS=1``). See supervisor.py.
"""

from __future__ import annotations

import json
import os

STATUS_FD_ENV = "JAX_SHARD_LINT_STATUS_FD"
STREAMS_ENV = "JAX_SHARD_LINT_STREAMS"
IN_PROCESS_ENV = "JAX_SHARD_LINT_IN_PROCESS"
LIFELINE_FD_ENV = "JAX_SHARD_LINT_LIFELINE_FD"
SCRATCH_PREFIX = "jax-shard-lint-"

_status_file = None  # the child's end of the status pipe; None in process (tests, the parent)
_started_groups: list[int] = []  # process groups the child started: killed if the parent dies


def open_status_pipe(fd: int) -> None:
    """The child's end of the status pipe, opened once at the child's start (cli/child.py)."""
    global _status_file
    _status_file = open(fd, "w", encoding="utf-8", buffering=1)


def close_status_pipe() -> None:
    global _status_file
    if _status_file is not None:
        _status_file.close()
        _status_file = None


def started_groups() -> list[int]:
    """The process groups this child started, to kill when its parent dies."""
    return list(_started_groups)


def phase(where: str, doing: str) -> None:
    """Tell the supervising parent which file is being worked on and how, so
    that a crash or a timeout can be reported against it. No-op in process."""
    send_status({"where": where, "doing": doing})


def process_group(pgid: int) -> None:
    """A process group the child started (``run``'s script): killed with it."""
    _started_groups.append(pgid)
    send_status({"process_group": pgid})


def send_status(message: dict) -> None:
    if _status_file is None:
        return
    try:
        _status_file.write(json.dumps(message) + "\n")
        _status_file.flush()
    except OSError:
        pass


def signal_groups(groups: list[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
