"""Progress a user sees while a long phase runs: counted steps on stderr with the seconds since the
command began, as plain lines where stderr is a log or a pipe (CI), nothing with -q; stdout keeps
the report alone. Run through the installed console script, as a CI job runs it, with --no-cache: what
is shown is what happens while compiling, and the run's analysis cache may hold any program another
test linted (a hit compiles nothing and shows nothing)."""

import json
import os
import re
import subprocess

from conftest import EXAMPLES, ROOT, console_script

VALUE = os.path.join(EXAMPLES, "value_function_step.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")
STEP = re.compile(r"^jax-shard-lint: \[(\d+)/(\d+)\] (.+) \((\d+\.\d) s\)$")


def _run(*args: str, checking_fixes: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if checking_fixes:
        env.pop("JAX_SHARD_LINT_NO_FIX_CHECK", None)
    done = subprocess.run([console_script(), *args, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done


def test_fix_checks_count_their_compiles_on_stderr_and_not_with_q():
    args = ("lint", VALUE, "--target", "sharded_on_grid", "--format", "json", "--fail-on", "never")
    shown = _run(*args, checking_fixes=True)
    lines = [line for line in shown.stderr.splitlines() if "not compiled, the same program" not in line]
    steps = [STEP.match(line) for line in lines]
    assert steps and all(steps), shown.stderr
    # Announced first (what is compiled, how many: "[0/n]"), then one line per compile as it finishes, naming it,
    # counted within its announcement; a second choice the checks ask for later is announced then and counts on
    # its own, so no total changes once counting starts (issue 46). The program as written is lint's own
    # compile: not compiled again.
    announced, finished = [], []
    for m in steps:
        done, shown_total, what = int(m.group(1)), int(m.group(2)), m.group(3)
        assert what.startswith("sharded_on_grid: "), shown.stderr
        if what.startswith("sharded_on_grid: compiled "):
            finished.append((done, shown_total))
            assert 1 <= done <= shown_total, shown.stderr
        else:
            assert done == 0, shown.stderr
            assert re.match(r"sharded_on_grid: compiling \d+ programs? to check (the fixes|a second choice): ", what)
            assert "the program as written" not in what, what
            announced.append(shown_total)
    assert sorted(finished) == sorted((k, n) for n in announced for k in range(1, n + 1)), shown.stderr
    assert announced, shown.stderr
    seconds = [float(m.group(4)) for m in steps]
    assert seconds == sorted(seconds)
    assert any(f["fix_check"] for f in json.loads(shown.stdout)["targets"][0]["findings"])

    quiet = _run(*args, "-q", checking_fixes=True)
    assert quiet.stderr == "" and json.loads(quiet.stdout) == json.loads(shown.stdout)


def test_fit_counts_its_probes():
    args = ("fit", REMAT, "--param", "batch", "--budget", "1GiB", "--multiple-of", "4", "--range", "4:16",
            "--set", "layers=2", "--format", "json")
    shown = _run(*args)
    lines = shown.stderr.splitlines()
    probes = json.loads(shown.stdout)["probes"]
    assert len(lines) == len(probes), shown.stderr
    for k, (line, probe) in enumerate(zip(lines, probes), start=1):
        assert re.fullmatch(rf"jax-shard-lint: \[probe {k}\] batch={probe['value']}: compiling \(\d+\.\d s\)",
                            line), line


def test_a_long_phase_is_named_in_a_log_and_a_refusal_stays_one_line():
    """A phase without a counter (lint's compile of a target) is named on a log's stderr once it has run
    JAX_SHARD_LINT_PHASE_NOTICE_S (3 s unless set); an input refused at once is still the one line."""
    env = dict(os.environ, JAX_SHARD_LINT_PHASE_NOTICE_S="0.2")
    shown = subprocess.run([console_script(), "lint", REMAT, "--format", "json", "--fail-on", "never", "--no-cache"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert re.search(r"^jax-shard-lint: analysing train_step \(\d+\.\d s\)$", shown.stderr, re.M), shown.stderr
    assert json.loads(shown.stdout)["targets"]

    refused = subprocess.run([console_script(), "lint", "no_such_script.py"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr


def test_a_program_read_from_the_cache_is_not_said_to_be_compiled(tmp_path):
    """suggest's versions the analysis cache already holds came back in 0.1 s and each line read 'compiled
    the written version' (newcomer12); run again on the same cache folder, every version is read from it."""
    args = [console_script(), "suggest", VALUE, "--target", "sharded_on_grid", "--set", "grid_points=1024", "--set",
            "states=64", "--format", "json", "--cache-dir", str(tmp_path / "cache")]
    runs = [subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    first, second = ([m.group(3) for m in map(STEP.match, run.stderr.splitlines()) if m and "compiling " not in
                      m.group(3)] for run in runs)
    assert first and all(what.startswith("sharded_on_grid: compiled the ") for what in first), runs[0].stderr
    # The same versions, in the order their threads finish.
    assert sorted(second) == sorted(what.replace(": compiled ", ": read from the cache: ", 1) for what in first), \
        runs[1].stderr
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)
