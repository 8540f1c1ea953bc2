"""What runs on a Ray worker: the candidate's lint in a child process, in the mirrored
layout of the machine that asked (bundle.py), with the answer made location-free.

The child, not the worker, runs user code and XLA: a script that crashes or exits
ends its child, and the worker reports that candidate's one-line error. A worker
that dies itself (its node lost, the process killed) is retried by Ray.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace

from ..adapter.compiler_releases import COMPILER_DISTRIBUTIONS, installed_releases
from ..context.display_paths import MIRROR_ROOT_ENV
from .bundle import Bundle, materialize, rerooted
from .candidates import CandidateOutcome, CandidateTask, run_child

# Fault injection for the tests: a path; the first task to find it missing creates it and its
# worker process dies at once, as a lost worker would (Ray then runs the task again).
LOSE_WORKER_ONCE_ENV = "JAX_SHARD_LINT_TEST_LOSE_WORKER_ONCE"


def run_on_worker(bundle: Bundle, task: CandidateTask) -> CandidateOutcome:
    began_at = time.time()
    _lose_worker_once()
    root = materialize(bundle)
    env = dict(os.environ)
    env.pop(LOSE_WORKER_ONCE_ENV, None)
    env[MIRROR_ROOT_ENV] = root
    worker = f"ray {socket.gethostname()} pid {os.getpid()}"
    outcome = run_child(replace(task, argv=rerooted(task.argv, bundle, root)), cwd=root + bundle.cwd, env=env,
                        worker=worker)
    unrooted = replace(
        outcome,
        report_json=outcome.report_json.replace(root, "") if outcome.report_json else None,
        error=outcome.error.replace(root, "") if outcome.error else None,
    )
    return replace(unrooted, extra=worker_versions(), began_at=began_at, ended_at=time.time())


def worker_versions() -> dict[str, str]:
    """The releases a worker compiles with; the sweep refuses a candidate compiled by others than its own."""
    from .. import __version__

    return {"jax-shard-lint": __version__, **installed_releases(COMPILER_DISTRIBUTIONS)}


def _lose_worker_once() -> None:
    marker = os.environ.get(LOSE_WORKER_ONCE_ENV)
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os._exit(1)
