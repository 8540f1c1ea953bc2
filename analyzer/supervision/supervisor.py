"""Every command runs in a child process that a thin parent supervises.

User code (a script's import, ``shard_lint_targets()``, ``rewrite --validate``)
and native code (XLA compiling a module a user handed us, the MLIR parser) can
end a process in ways Python cannot catch: ``os._exit``, a signal, a CHECK
failure, a segfault, an infinite loop, a non-daemon thread that never ends.
The parent never imports JAX. It starts ``python -P -m jax_shard_lint.analyzer.cli.child``
in its own process group and waits at most ``--timeout`` seconds. ``-P``: the
working directory is not on the child's ``sys.path``, so a ``jax.py`` or a
``numpy/`` beside a checked-in fixture is never imported in place of the real
one; the script's folder (or, for ``package.module:fn``, the working directory)
is added only where a user's script is imported on purpose (inputs/scripts.py). The child
says what it is doing (the file and the phase) and, last, the exit code of the
finished command, on a status pipe. So the parent knows three outcomes apart:

- the command finished: its exit code, its report on stdout;
- the child ended without finishing (a signal, or an exit the command never
  made): one line naming the file and what was running, exit 2;
- the time ran out: the whole process group is killed, one line, exit 2.

What native code writes straight to file descriptors 1 and 2 (XLA's logs, a
CHECK failure's stack, a script's C extension printing) goes to a file the
parent reads only to quote a crash's reason; ``--debug`` shows all of it. The
command's own stdout and stderr are the parent's, so a terminal is still a
terminal (colours, progress); its size, which rich measures on descriptors 0-2,
is measured by the parent and handed over (terminal_size.py).

The child dies with its parent: it holds the read end of a lifeline pipe whose
only writer is the parent, and a thread waits for its end of file. A parent
killed with SIGKILL (a CI timeout) closes it; the child then kills the process
groups it started, removes the scratch folder and exits. A scratch folder a
machine crash left behind is removed by the next command (its name carries the
parent's process id).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from ..errors import ShardLintInputError
from ..exit_codes import EXIT_INPUT
from .isolation import IN_PROCESS_ENV, LIFELINE_FD_ENV, SCRATCH_PREFIX, STATUS_FD_ENV, STREAMS_ENV, signal_groups

# The most a command runs by default: generous for a 64-layer model's compile
# on two cores, finite so that a loop in a script cannot hold a CI runner.
DEFAULT_TIMEOUT_S = 3600.0
# After `run`'s own --timeout stops the script, this long is left to read its dumps.
RUN_ANALYSIS_MARGIN_S = 600.0
# After SIGTERM, how long the group gets before SIGKILL.
TERMINATE_GRACE_S = 2.0



@dataclass
class ChildStatus:
    where: str
    doing: str
    exit_code: int | None = None
    process_groups: list[int] = field(default_factory=list)

    def read(self, stream) -> None:
        for line in stream:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "exit" in message:
                self.exit_code = int(message["exit"])
            if "where" in message:
                self.where, self.doing = str(message["where"]), str(message["doing"])
            if "process_group" in message:
                self.process_groups.append(int(message["process_group"]))


def in_process() -> bool:
    return os.environ.get(IN_PROCESS_ENV) == "1"


def supervise(argv: list[str], first_input: str, timeout_s: float, debug: bool) -> int:
    """Run the command in a child and turn how it ended into an exit code."""
    from .terminal_size import TERMINAL_ENV, measure_terminal

    status = ChildStatus(first_input, "starting")
    read_fd, write_fd = os.pipe()
    life_read, life_write = os.pipe()
    out_fd, err_fd = os.dup(1), os.dup(2)
    env = dict(os.environ)
    env[STATUS_FD_ENV] = str(write_fd)
    env[STREAMS_ENV] = f"{out_fd},{err_fd}"
    env[LIFELINE_FD_ENV] = str(life_read)
    env[TERMINAL_ENV] = measure_terminal().to_env()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Compile-only TPU targets touch no TPU: several processes may load libtpu at
    # once (parallel CI jobs, sweep --jobs) without its machine-wide lock.
    env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # The child's temporary files (XLA dumps, `run`'s capture) go in a folder of
    # ours, removed however the child ends: a killed child cleans up nothing.
    _remove_orphaned_scratch()
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    env["TMPDIR"] = scratch
    try:
        return _supervise(argv, env, status, read_fd, (write_fd, out_fd, err_fd, life_read), timeout_s, debug)
    finally:
        os.close(life_write)  # only now: the child's lifeline ends with the parent
        shutil.rmtree(scratch, ignore_errors=True)


def _remove_orphaned_scratch() -> None:
    """Scratch folders whose parent process is gone (a machine crash, or a
    child killed at once with its parent): nobody else will remove them."""
    pattern = re.compile(re.escape(SCRATCH_PREFIX) + r"(\d+)-")
    try:
        entries = os.listdir(tempfile.gettempdir())
    except OSError:
        return
    for entry in entries:
        m = pattern.match(entry)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tempfile.gettempdir(), entry), ignore_errors=True)
        except (PermissionError, OverflowError):
            pass


def _supervise(argv: list[str], env: dict, status: ChildStatus, read_fd: int, passed: tuple[int, ...],
               timeout_s: float, debug: bool) -> int:
    with tempfile.TemporaryFile() as native:
        try:
            # -P: no working directory (nor script folder) on the child's sys.path.
            child = subprocess.Popen(
                [sys.executable, "-P", "-m", "jax_shard_lint.analyzer.cli.child", *argv],
                stdin=subprocess.DEVNULL, stdout=native, stderr=native, env=env,
                pass_fds=passed, process_group=0,
            )
        finally:
            for fd in passed:
                os.close(fd)
        reader = threading.Thread(target=status.read, args=(os.fdopen(read_fd, encoding="utf-8"),), daemon=True)
        reader.start()
        # The child has its own process group, so a CI runner stopping this one
        # (SIGTERM, SIGHUP) would orphan it: pass the stop on.
        previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
        previous[signal.SIGINT] = signal.getsignal(signal.SIGINT)
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(child, status)
            reader.join(1.0)
            return _fail(status, f"stopped after {timeout_s:g} s (--timeout) while {status.doing}")
        except (KeyboardInterrupt, _Stopped) as e:
            sig = e.signal if isinstance(e, _Stopped) else signal.SIGINT
            # A second stop while the child is stopped (timeout(1) signals this process and then its group;
            # Ctrl-C pressed twice) is ignored until the process exits: raised inside the cleanup it was a
            # traceback, and with the default handler back it ended the process by the signal (-15), not 143.
            for other in previous:
                signal.signal(other, signal.SIG_IGN)
            previous.clear()
            _kill(child, status)
            print(f"jax-shard-lint: {status.where}: stopped by {signal.Signals(sig).name} while {status.doing}",
                  file=sys.stderr)
            return 128 + sig
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        reader.join(5.0)
        # The child is gone; what it started in its own group (a script's workers) goes with it.
        signal_groups(status.process_groups + [child.pid], signal.SIGKILL)
        native.seek(0)
        captured = native.read().decode("utf-8", errors="replace")
        if debug:  # what native code wrote, held back otherwise: a crash's full story
            sys.stderr.write(captured)
        if status.exit_code is not None and code == status.exit_code:
            return code
        return _fail(status, _how_it_ended(code, status.doing, captured))


class _Stopped(Exception):
    def __init__(self, sig: int):
        super().__init__(sig)
        self.signal = sig


def _stopped(sig, _frame):
    raise _Stopped(sig)


def _fail(status: ChildStatus, problem: str) -> int:
    print(f"jax-shard-lint: error: {ShardLintInputError(status.where, problem)}", file=sys.stderr)
    return EXIT_INPUT


def _how_it_ended(code: int, doing: str, native_stderr: str) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        kind = ("out of memory, or killed" if -code == signal.SIGKILL else
                "a native crash" if -code in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE) else
                "a native abort" if -code == signal.SIGABRT else "a signal")
        reason = _native_reason(native_stderr)
        return f"the process died of {name} ({kind}) while {doing}" + (f": {reason}" if reason else "")
    return (f"the process exited with code {code} while {doing}, before jax-shard-lint finished "
            "(os._exit or a native exit in the code it ran)")


_REASON = re.compile(r"(Check failed: .*|F\d{4} .*|terminate called .*|what\(\): .*|Fatal Python error: .*|"
                     r"LLVM ERROR: .*|std::bad_alloc.*|.*BadStatusOrAccess.*)")


def _native_reason(text: str) -> str:
    """The line a native crash left that says why, shortened and made printable."""
    found = _REASON.search(text)
    if not found:
        return ""
    line = re.sub(r"[\x00-\x1f\x7f]", "?", found.group(1)).strip()
    line = re.sub(r"^F\d{4} [\d:. ]+\d+ \S+\] ", "", line)  # absl's "F0000 00:00:... file.cc:12] " prefix
    return line if len(line) <= 200 else line[:199] + "…"


def _kill(child: subprocess.Popen, status: ChildStatus) -> None:
    groups = [child.pid] + status.process_groups
    signal_groups(groups, signal.SIGTERM)
    try:
        child.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    signal_groups(groups, signal.SIGKILL)
    child.wait()



