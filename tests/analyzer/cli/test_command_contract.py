"""The command contract, through the installed console script as a user runs it:
no code from the working directory, the real terminal's width, honest exit
codes, ``-o`` for every command and format, nothing left running after the
parent is killed, parallel TPU compiles.

Each test starts ``jax-shard-lint`` (the console script beside this Python) in
a child process: the supervising parent and its child are what is under test.
One exception: ``-o``'s every format of every command is written in process
(``run_command``, the code the supervised child runs), each command once more
through the console script: a child process a format cost a JAX start-up each
(41 of them, most of that test's 96 s).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import importlib.util
import json
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest
from conftest import EXAMPLES, FIXTURES, ROOT, console_script

from jax_shard_lint.reports.registry import RENDERERS, formats, renderer

CORPUS = os.path.join(FIXTURES, "bad_input", "corpus")
ONE_DEVICE_MLIR = os.path.join(CORPUS, "one_device.mlir")
GATE_STEP = os.path.join(FIXTURES, "gate", "step_v1.py")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def user_env(**extra: str) -> dict:
    """The environment a user's shell has: no test-only settings, no width override."""
    drop = {"JAX_SHARD_LINT_IN_PROCESS", "COLUMNS", "LINES", "XLA_FLAGS", "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def shard_lint(*args: str, cwd: str = ROOT, env: dict | None = None, timeout: float = 300):
    return subprocess.run([console_script(), *args], cwd=cwd, env=env or user_env(), capture_output=True,
                          text=True, timeout=timeout)


# --- no code from the working directory ---------------------------------------------


SHADOWS = {  # module file -> what it would do if imported
    "jax.py": "jax",
    "numpy/__init__.py": "numpy",
    "rich.py": "rich",
    "pydantic.py": "pydantic",
    "jax_shard_lint.py": "jax_shard_lint",
}


def _plant_shadows(folder) -> None:
    for rel, name in SHADOWS.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = folder / f"IMPORTED_{name}"
        path.write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit('shadow {name} imported')\n")


@pytest.mark.parametrize("argv", [
    ["check", "step.mlir", "-q"],
    ["propagate", "step.mlir", "--no-compile", "-q"],
    ["gate", "--baseline", "baseline.json", "step.mlir", "--update", "-q"],
], ids=["check", "propagate", "gate"])
def test_code_in_the_working_directory_is_never_imported(tmp_path, argv):
    """A pull request that adds jax.py (or a numpy/ package) beside its fixtures
    must not run it in a CI gate: the child starts with -P."""
    _plant_shadows(tmp_path)
    shutil.copy(ONE_DEVICE_MLIR, tmp_path / "step.mlir")
    done = shard_lint(*argv, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("IMPORTED_")) == []


def test_a_module_entry_point_still_imports_from_the_working_directory(tmp_path):
    """``package.module:fn`` is found where ``python -m`` finds it: the working
    directory is added on purpose for that import, after JAX is loaded."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "targets.py").write_text(textwrap.dedent("""
        import jax
        import jax.numpy as jnp

        def my_targets():
            return {"double": jax.jit(lambda a: a * 2).lower(jnp.ones(8))}
    """))
    done = shard_lint("lint", "mypkg.targets:my_targets", "--format", "json", "-q", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert [t["name"] for t in json.loads(done.stdout)["targets"]] == ["double"]


# --- the real terminal -----------------------------------------------------------------


def _run_in_pty(args: list[str], columns: int, env: dict) -> str:
    """What a terminal of ``columns`` columns shows, colour codes stripped."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([console_script(), *args], cwd=ROOT, env=env, stdin=slave, stdout=slave,
                            stderr=slave, start_new_session=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace")).replace("\r", "")


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("columns", [130, 100])
def test_the_report_takes_the_width_of_the_users_terminal(columns):
    args = ["lint", os.path.join(EXAMPLES, "fsdp_tp_train_step.py"), "-q", "--fail-on", "never"]
    shown = _run_in_pty(args, columns, user_env())
    assert "train_step" in shown
    # The report fills the terminal it has (it rendered at 80 before), and never wraps past it.
    assert columns - 5 <= _widest(shown) <= columns


def test_columns_still_overrides_the_terminal():
    args = ["lint", os.path.join(EXAMPLES, "fsdp_tp_train_step.py"), "-q", "--fail-on", "never"]
    shown = _run_in_pty(args, 130, user_env(COLUMNS="90"))
    assert 85 <= _widest(shown) <= 90


# --- honest exit codes -----------------------------------------------------------------


def test_run_exits_4_when_the_script_fails_and_still_reports_what_it_compiled():
    done = shard_lint("run", os.path.join(EXAMPLES, "train_loop.py"), "--devices", "8", "--format", "json", "-q",
                      "--", "--steps", "3", "--fail-at", "1")
    assert done.returncode == 4, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["run"]["exit_code"] == 1
    assert "data loader failed at step 1" in report["run"]["error"]
    assert report["run"]["programs_reported"] >= 1
    assert any(t["name"] == "jit_train_step" for t in report["targets"])


def test_run_of_a_script_that_finishes_exits_as_lint():
    done = shard_lint("run", os.path.join(EXAMPLES, "train_loop.py"), "--devices", "8", "--format", "json", "-q",
                      "--fail-on", "never", "--", "--steps", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["run"]["exit_code"] == 0


# --- -o for every command and format ---------------------------------------------------

SIZED_SCRIPT = '''
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def step(w, x):
    return jnp.tanh(x @ w)


def shard_lint_targets(batch=64, mesh_shape=(4, 2), mesh_devices=None):
    mesh = jax.make_mesh(mesh_shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    x = jax.ShapeDtypeStruct((batch, 256), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    return {"step": jax.jit(step).lower(w, x)}
'''

# Every command and format the registry renders: a new format is tested here without a line changed.
FORMATS = {command: formats(command) for command in RENDERERS}


def _argv(command: str, script: str, baseline: str) -> list[str]:
    return {
        "lint": ["lint", script, "--fail-on", "never"],
        "check": ["check", ONE_DEVICE_MLIR, "--fail-on", "never"],
        "run": ["run", os.path.join(EXAMPLES, "train_loop.py"), "--devices", "8", "--fail-on", "never"],
        "propagate": ["propagate", script, "--no-compile"],
        "rewrite": ["rewrite", ONE_DEVICE_MLIR],
        "suggest": ["suggest", script, "--solver", "local"],
        "sweep": ["sweep", script, "--grid", "batch=32,64"],
        "fit": ["fit", script, "--param", "batch", "--budget", "64MiB", "--multiple-of", "8", "--range", "8:512"],
        "gate": ["gate", "--baseline", baseline, GATE_STEP],
    }[command]


def _check_written(fmt: str, text: str) -> None:
    assert text.strip(), "empty report"
    if fmt == "terminal":
        assert "\x1b" not in text  # a file gets no colour codes
    elif fmt in ("json", "sarif"):
        parsed = json.loads(text)
        assert fmt != "sarif" or parsed["version"] == "2.1.0"
    elif fmt == "html":
        assert text.lstrip().lower().startswith("<!doctype html")


@pytest.mark.slow  # over 30 s: run on the pinned JAX only in CI (.ci/run)
def test_output_option_writes_every_command_and_format(tmp_path, cli):
    """Every format of every command written with -o (in process: the supervised child's own code), and
    every command once through the console script, whose supervising parent passes the child's stdout
    through: with -o nothing reaches it."""
    script = tmp_path / "sized.py"
    script.write_text(SIZED_SCRIPT)
    snap = tmp_path / "snap"
    made = shard_lint("snapshot", GATE_STEP, "-o", str(snap), "-q")
    assert made.returncode == 0, made.stderr[-2000:]

    def argv(command: str, fmt: str, out) -> list[str]:
        script_args = ["--", "--steps", "1"] if command == "run" else []
        return [*_argv(command, str(script), str(snap / "baseline.json")), "--format", fmt, "-o", str(out), "-q",
                *script_args]

    def checked(command: str, fmt: str, code: int, stdout: str, stderr: str, out) -> str | None:
        try:
            assert code in (0, 1), stderr[-1500:]
            assert stdout == "", "the report went to stdout, not to -o"
            assert out.exists(), "-o was not written"
            _check_written(fmt, out.read_text(encoding="utf-8"))
        except (AssertionError, ValueError) as e:
            return f"{command} --format {fmt}: {e}"
        return None

    failures = []
    for command, fmts in FORMATS.items():
        for fmt in fmts:
            out = tmp_path / f"{command}-{fmt}.out"
            done = cli(*argv(command, fmt, out))
            failures.append(checked(command, fmt, done.code, done.out, done.err, out))

    def through_the_console_script(command: str):
        out = tmp_path / f"{command}-console-script.out"
        done = shard_lint(*argv(command, "terminal", out))
        return checked(command + " (console script)", "terminal", done.returncode, done.stdout, done.stderr, out)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        failures += pool.map(through_the_console_script, FORMATS)
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)


# --- nothing left running --------------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        for k in kids:
            if k not in found:
                found.add(k)
                todo.append(k)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, awaiting its reaper
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process trees from /proc")
@pytest.mark.parametrize("argv, expected", [
    (["lint", os.path.join(CORPUS, "infinite_loop.py")], 1),  # the child, looping in the script's import
    (["run", os.path.join(CORPUS, "run_spawns.py")], 3),  # the child, the script, and what the script started
], ids=["lint-in-a-loop", "run-with-grandchildren"])
def test_sigkill_to_the_parent_leaves_no_process_and_no_scratch_folder(tmp_path, argv, expected):
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    parent = subprocess.Popen([console_script(), *argv], cwd=ROOT, env=user_env(TMPDIR=str(scratch_root)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_descendants(parent.pid)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # well inside the command: the script is running
    family = _descendants(parent.pid)
    assert len(family) >= expected, f"only {len(family)} processes started"
    assert [p.name for p in scratch_root.iterdir()], "the parent made no scratch folder"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in family if _alive(p)] == []
    assert [p.name for p in scratch_root.iterdir()] == []


def test_a_scratch_folder_whose_parent_is_gone_is_removed_by_the_next_command(tmp_path):
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (scratch_root / f"jax-shard-lint-{dead.pid}-abc123").mkdir()
    keep = scratch_root / "jax-shard-lint-notmine"
    keep.mkdir()
    done = shard_lint("rules", env=user_env(TMPDIR=str(scratch_root)))
    assert done.returncode == 0
    assert sorted(p.name for p in scratch_root.iterdir()) == ["jax-shard-lint-notmine"]


# --- TPU compile-only targets ----------------------------------------------------------

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="needs libtpu (pip install 'jax-shard-lint[tpu]')")
# The layer stack made small: a TPU compile of it is seconds, where its default size's was ~20 s of CPU.
SMALL_REMAT = ("--set", "batch=8", "--set", "seq=128", "--set", "d_model=256", "--set", "d_ff=512")


@needs_libtpu
def test_two_tpu_compiles_at_once_both_succeed(tmp_path):
    """libtpu's machine-wide lock is for processes that use a TPU; compile-only ones may share the machine.
    Neither reads the run's analysis cache: an entry another test left would let both finish uncompiled. The
    stack is made small (the lock is taken when libtpu starts, whatever it then compiles; the TPU compiler's
    own start keeps each process holding it for seconds): at its default sizes each compile was ~20 s of CPU."""
    example = os.path.join(EXAMPLES, "remat_layer_stack.py")
    procs = [subprocess.Popen([console_script(), "lint", example, *SMALL_REMAT, "--platform", "tpu-v5p", "--format",
                               "json", "-q", "--fail-on", "never", "--no-cache", "-o", str(tmp_path / f"{k}.json")],
                              cwd=ROOT, env=user_env(), stderr=subprocess.PIPE, text=True) for k in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code == 0, err[-2000:]
        assert "sudo rm" not in err
    for k in range(2):
        assert json.loads((tmp_path / f"{k}.json").read_text())["targets"][0]["platform"].startswith("tpu-v5p")


@needs_libtpu
def test_a_tpu_target_with_a_gpu_budget_says_so():
    """The warning is the settings' (the budget's preset and the target's own memory), whatever the program's
    size: the stack at the small size above, a fraction of its default size's TPU compile."""
    done = shard_lint("lint", os.path.join(EXAMPLES, "remat_layer_stack.py"), *SMALL_REMAT, "--platform", "tpu-v5e",
                      "--device", "h100", "--format", "json", "-q", "--fail-on", "never")
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = json.loads(done.stdout)["targets"][0]["warnings"]
    assert any("the budget is the h100 preset's (79.1 GiB)" in w and "tpu-v5e compile" in w and "16.0 GiB" in w
               for w in warnings), warnings


def test_the_h100_nvl_hint_names_a_platform_the_parser_accepts():
    done = shard_lint("lint", GATE_STEP, "--device", "h100-nvl", "--format", "json", "-q", "--fail-on", "never")
    assert done.returncode == 0, done.stderr[-2000:]
    (warning,) = json.loads(done.stdout)["targets"][0]["warnings"]
    suggested = re.search(r"--platform (\S+)", warning).group(1)
    assert suggested == "h100"
    help_text = shard_lint("lint", "--help").stdout
    assert re.search(r"--platform \{[^}]*\bh100\b", help_text)


def test_every_registered_renderer_exists_and_help_offers_exactly_those_formats():
    for command, table in RENDERERS.items():
        for fmt in table:
            assert callable(renderer(command, fmt)), (command, fmt)
        shown = shard_lint(command, "--help").stdout
        assert re.search(r"--format \{" + ",".join(table) + r"\}", shown), (command, shown[:400])
    refused = shard_lint("suggest", "examples/fsdp_tp_train_step.py", "--format", "sarif")
    assert refused.returncode == 2 and "invalid choice: 'sarif'" in refused.stderr


def test_a_reader_that_closes_stdout_is_not_an_internal_error():
    """``jax-shard-lint lint ... | head``: the report's write meets a closed pipe. Exit 141 (a shell's
    SIGPIPE status) and nothing on stderr; it was 'internal error: BrokenPipeError', exit 3."""
    proc = subprocess.Popen([console_script(), "lint", os.path.join("examples", "fsdp_tp_train_step.py"),
                             "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # the reader goes away before the report is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 141, err
    assert "internal error" not in err and "Traceback" not in err
