"""Stopping a command: one line on stderr, no traceback, exit 128 + the signal (143 for SIGTERM), the
convention of a shell and of ``main``'s KeyboardInterrupt (130).

GNU timeout signals the process it runs and then its whole process group, so the supervisor gets
SIGTERM twice; the second arrived while it was stopping its child and came out as a traceback
(``_Stopped: 15`` raised inside ``_kill``'s wait)."""

import glob
import os
import signal
import subprocess
import time

from conftest import EXAMPLES, ROOT, console_script


def _child_pids(pid):
    pids = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):  # any of its threads may have started it
        try:
            with open(task) as children:
                pids += children.read().split()
        except OSError:
            pass
    return pids


def _wait_for_a_child_process(pid, popen, limit_s=60.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and popen.poll() is None:
        if _child_pids(pid):
            return True
        time.sleep(0.02)
    return False


def test_sigterm_twice_during_suggest_is_one_line_and_143():
    script = os.path.join(EXAMPLES, "value_function_step.py")
    env = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    child = subprocess.Popen([console_script(), "suggest", script, "-q", "--no-cache"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0)
    # Signal as soon as the supervisor has started its child (which then imports JAX and traces: seconds),
    # not after a fixed sleep: on a fast machine suggest finished inside one.
    assert _wait_for_a_child_process(child.pid, child), child.communicate()
    time.sleep(0.3)
    assert child.poll() is None, child.communicate()
    os.kill(child.pid, signal.SIGTERM)  # as timeout(1) does: the process, then its group
    time.sleep(0.2)  # the second while the supervisor stops its child
    os.killpg(child.pid, signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jax-shard-lint: ") and "stopped by SIGTERM while " in lines[0], err
    assert out == ""
