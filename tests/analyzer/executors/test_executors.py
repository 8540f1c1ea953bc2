"""Where a sweep's candidates compile: this process, local child processes, or Ray tasks
on a local Ray cluster. Wherever they ran, the report is the same byte for byte apart
from its ``execution`` record (where and how long)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest
from ci_deps import missing, require
from conftest import ROOT

from jax_shard_lint.analyzer.executors.bundle import make_bundle, make_path_bundle, materialize, rerooted
from jax_shard_lint.analyzer.executors.candidates import CandidateOutcome
from jax_shard_lint.analyzer.executors.ray_cluster import _same_releases, _with_overheads
from jax_shard_lint.analyzer.executors.ray_worker import LOSE_WORKER_ONCE_ENV

VALUE = os.path.join("examples", "value_function_step.py")
GRID = ("--grid", "states=256,255,512")  # 255 states do not split over 8 devices: that candidate fails


def _sweep(cli, *args):
    result = cli("sweep", *args, "--format", "json", "-q", "--no-cache")
    assert result.code in (0, 1), result.err[-2000:]
    return json.loads(result.out)


def _sweep_here(cli, *args):
    """The sweep in this process, the report the spread sweeps are compared with: through the run's analysis
    cache (tests/conftest.py), so that the local processes' and Ray's sweeps of one grid compare with one
    in-process run of its candidates (as _check_here below); the spread runs compile theirs anew (--no-cache)."""
    result = cli("sweep", *args, "--format", "json", "-q")
    assert result.code in (0, 1), result.err[-2000:]
    return json.loads(result.out)


def _without_execution(run):
    return {k: v for k, v in run.items() if k != "execution"}


def test_local_processes_give_the_in_process_report(cli):
    one = _sweep_here(cli, VALUE, *GRID)
    two = _sweep(cli, VALUE, *GRID, "--jobs", "2")
    assert _without_execution(one) == _without_execution(two)
    assert one["execution"]["executor"] == "in-process" and two["execution"]["executor"] == "local"
    runs = two["execution"]["runs"]
    assert [r["label"] for r in runs] == ["states=256", "states=255", "states=512"]
    assert all(r["seconds"] > 0 and r["worker"].startswith("this machine, slot_") for r in runs)
    failed = [c for c in two["candidates"] if c["error"]]
    assert [c["params"] for c in failed] == [{"states": 255}]


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """Three checked-in targets of two scripts, in one snapshot folder."""
    from jax_shard_lint.analyzer.cli.main import run_command

    folder = tmp_path_factory.mktemp("snap")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for script in (os.path.join("fixtures", "gate", "step_v1.py"), VALUE):
            assert run_command(["snapshot", script, "-o", str(folder), "-q", "--no-cache"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def _check(cli, *args):
    result = cli("check", *args, "--format", "json", "--fail-on", "never", "--no-cache", "-q")
    assert result.code == 0, result.err[-2000:]
    return result.out


def _check_here(cli, paths):
    """The snapshots checked in this process, the report the spread checks are compared with: through the run's
    analysis cache (tests/conftest.py), so that the in-process check and the one on Ray compare with one
    compile of each snapshot, made by whichever test runs first (a hit is the same bytes:
    tests/analyzer/commands/test_suggest_runs_agree.py); where each compiles is what they test."""
    result = cli("check", *paths, "--format", "json", "--fail-on", "never", "-q")
    assert result.code == 0, result.err[-2000:]
    return result.out


def test_check_in_local_processes_is_check_in_process(cli, snapshots):
    paths = sorted(str(p) for p in snapshots.glob("*.mlir"))
    assert len(paths) == 3
    assert _check(cli, *paths, "--jobs", "2") == _check_here(cli, paths)
    gate = cli("gate", "--baseline", str(snapshots), "--jobs", "2", "--no-cache", "--format", "json")
    assert gate.code == 0 and json.loads(gate.out)["passed"] is True, gate.err


def test_check_spread_fails_on_a_broken_path_as_in_process(cli, snapshots, tmp_path):
    broken = tmp_path / "broken.mlir"
    broken.write_text("module {\n  func.func @main(")
    paths = [str(next(snapshots.glob("*.mlir"))), str(broken)]
    # -q: side by side, each path finished is a progress line on stderr before the error.
    here = cli("check", *paths, "--no-cache", "-q")
    spread = cli("check", *paths, "--no-cache", "--jobs", "2", "-q")
    assert here.code == spread.code == 2
    assert spread.err == here.err and spread.err.startswith(f"jax-shard-lint: error: {broken}: ")


@pytest.mark.slow  # 33 s: two TPU compiles here and two side by side
def test_tpu_candidates_compile_side_by_side(cli, monkeypatch):
    """Several compile-only TPU processes at once, beside this one (which loads libtpu for the
    in-process sweep): libtpu's machine-wide lock would let only one in. One target of the script: two
    candidates are two processes at once whatever each compiles (both targets were twice the TPU compiles)."""
    require("libtpu", "no libtpu (pip install 'jax-shard-lint[tpu]')")
    monkeypatch.delenv("ALLOW_MULTIPLE_LIBTPU_LOAD", raising=False)
    args = (VALUE, "--target", "sharded_on_grid", "--platform", "tpu-v5e", "--grid", "states=256,512",
            "--set", "grid_points=4096")
    here = _sweep(cli, *args)
    side_by_side = _sweep(cli, *args, "--jobs", "2")
    assert _without_execution(side_by_side) == _without_execution(here)
    assert all(c["error"] is None for c in side_by_side["candidates"])


SUGGEST = (VALUE, "--target", "sharded_on_grid", "--set", "grid_points=1024", "--set", "states=64")


def _suggest(cli, *args, cache=False):
    result = cli("suggest", *args, "--format", "json", "-q", *(() if cache else ("--no-cache",)))
    assert result.code == 0, result.err[-2000:]
    report = json.loads(result.out)
    return report


def _suggest_here(cli):
    """SUGGEST's versions compiled in this process, the report the spread runs are compared with: through the
    run's analysis cache, so that the side-by-side and the Ray test compare with one in-process compile of
    each version (as _check_here); the spread runs compile theirs anew (--no-cache)."""
    return _suggest(cli, *SUGGEST, cache=True)


@pytest.mark.slow  # 31 s: where the versions compile, not what; the same JAX here and there
def test_suggest_versions_side_by_side_are_the_versions_here(cli):
    here = _suggest_here(cli)
    assert len(here["targets"][0]["versions"]) >= 4
    assert _suggest(cli, *SUGGEST, "--jobs", "2") == here


def test_ray_not_installed_is_one_line(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    result = cli("sweep", VALUE, "--executor", "ray")
    assert result.code == 2
    assert result.err.strip() == ("jax-shard-lint: error: --executor: ray is not installed here: "
                                  "pip install 'jax-shard-lint[ray]'")


def test_a_ray_address_needs_the_ray_executor(cli):
    result = cli("sweep", VALUE, "--ray-address", "auto")
    assert result.code == 2 and result.err.strip() == "jax-shard-lint: error: --ray-address: needs --executor ray"


def test_a_worker_with_other_releases_is_refused():
    here = {"jax-shard-lint": "0.1.0", "jax": "0.10.2", "jaxlib": "0.10.2"}
    there = CandidateOutcome(0, "{}", None, "ray node-3 pid 7", 1.0, extra={**here, "jaxlib": "0.12.0.1"})
    refused = _same_releases(there, here)
    assert refused.report_json is None
    assert refused.error == "compiled by other releases on ray node-3 pid 7: jaxlib 0.12.0.1 (here 0.10.2)"
    assert _same_releases(CandidateOutcome(0, "{}", None, "w", 1.0, extra=here), here).error is None


def test_overhead_excludes_queueing_behind_other_candidates():
    # One worker, two tasks handed out at t=100: the second waits for the first (queueing), then starts 0.5 s
    # after the first ended; each result arrives 0.25 s after its end there; 1 s of each run is not the child's.
    a = CandidateOutcome(0, "{}", None, "w", 9.0, began_at=100.5, ended_at=110.5)
    b = CandidateOutcome(1, "{}", None, "w", 9.0, began_at=111.0, ended_at=121.0)
    timed = _with_overheads([a, b], 100.0, {0: 110.75, 1: 121.25})
    assert [round(o.overhead_seconds, 6) for o in timed] == [0.5 + 1.0 + 0.25, 0.5 + 1.0 + 0.25]


def test_a_bundle_mirrors_paths_so_reports_read_the_same(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("import helper\n")
    (project / "helper.py").write_text("X = 1\n")
    (project / "pkg" / "data.json").write_text("{}")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref")
    monkeypatch.chdir(tmp_path)
    bundle = make_bundle(str(project / "train.py"), [])
    assert sorted(os.path.relpath(p, project) for p, _ in bundle.files) == ["helper.py", "pkg/data.json", "train.py"]
    root = materialize(bundle)
    try:
        assert (open(root + str(project / "helper.py")).read()) == "X = 1\n"
        assert os.path.isdir(root + str(tmp_path))  # the working directory, mirrored: relative paths read the same
        argv = rerooted(("lint", str(project / "train.py") + ":targets", "--config", "rel.toml"), bundle, root)
        assert argv == ("lint", root + str(project / "train.py") + ":targets", "--config", "rel.toml")
        assert materialize(bundle) == root  # written once per machine
        dumps = make_path_bundle([str(project / "pkg")], [])
        assert rerooted(("check", str(project / "pkg")), dumps, root) == ("check", root + str(project / "pkg"))
    finally:
        shutil.rmtree(root)


def test_a_script_folder_too_large_to_ship_is_one_line(tmp_path, monkeypatch):
    from jax_shard_lint.analyzer.errors import ShardLintInputError
    from jax_shard_lint.analyzer.executors import bundle as bundle_module

    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_BYTES", 10)
    (tmp_path / "train.py").write_text("x = 'more than ten bytes'\n")
    with pytest.raises(ShardLintInputError, match="move the script into a folder of its own"):
        make_bundle(str(tmp_path / "train.py"), [])


# ---- on a local Ray cluster ----

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two CPUs (``ray start --head --block`` in a process group of its own),
    killed with its group after this module's tests: never ``ray stop``, which stops every Ray
    cluster on the machine."""
    require("ray", "Ray is not installed (pip install 'jax-shard-lint[ray]')")
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    # No token authentication on this throwaway cluster (a token in ~/.ray would otherwise be required of us).
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", "--num-cpus", "2", "--port", str(_free_port()),
                             "--include-dashboard", "false", "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    address, said = None, []
    for line in head.stdout:
        said.append(line)
        found = re.search(r"--address='([^']+)'", line)
        if found:
            address = found.group(1)
            break
    # Keep reading what it says, so that a full pipe never blocks it.
    threading.Thread(target=lambda: [None for _ in head.stdout], daemon=True).start()
    try:
        if address is None:
            missing(f"a local Ray cluster could not start here: {''.join(said)[-300:]}")
        yield address
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()


def test_ray_sweep_is_the_local_sweep(cli, ray_cluster):
    local = _sweep_here(cli, VALUE, *GRID)
    on_ray = _sweep(cli, VALUE, *GRID, "--executor", "ray", "--ray-address", ray_cluster)
    assert _without_execution(on_ray) == _without_execution(local)
    x = on_ray["execution"]
    assert x["executor"] == "ray" and x["workers"] == 2
    assert [r["label"] for r in x["runs"]] == ["states=256", "states=255", "states=512"]
    assert all(r["worker"].startswith("ray ") and r["seconds"] > 0 and r["overhead_seconds"] >= 0 for r in x["runs"])
    # The candidate the script rejects is reported with the same one line as locally.
    assert [c["error"] for c in on_ray["candidates"] if c["error"]] == \
        [c["error"] for c in local["candidates"] if c["error"]]


def test_a_lost_worker_is_retried(cli, ray_cluster, tmp_path, monkeypatch):
    marker = tmp_path / "lost-once"
    monkeypatch.setenv(LOSE_WORKER_ONCE_ENV, str(marker))
    run = _sweep(cli, VALUE, "--grid", "states=256,512", "--executor", "ray", "--ray-address", ray_cluster)
    assert marker.exists(), "no worker was lost: the fault was not injected"
    assert all(c["error"] is None for c in run["candidates"]) and len(run["candidates"]) == 4  # 2 targets each


def test_a_script_outside_the_working_directory_with_its_helper(cli, ray_cluster, tmp_path):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for name in ("step_v1.py",):
        shutil.copy(os.path.join("fixtures", "gate", name), folder / name)
    (folder / "entry.py").write_text("from step_v1 import shard_lint_targets  # noqa: F401\n")
    script = str(folder / "entry.py")
    local = _sweep(cli, script, "--jobs", "2")
    on_ray = _sweep(cli, script, "--executor", "ray", "--ray-address", ray_cluster)
    assert _without_execution(on_ray) == _without_execution(local)
    sources = [c["top_collectives"][0]["source"] for c in on_ray["candidates"] if c["top_collectives"]]
    assert all(s is None or s["file"].startswith(str(folder)) for s in sources)  # this machine's paths


def test_check_on_ray_is_check_here(cli, ray_cluster, snapshots):
    paths = sorted(str(p) for p in snapshots.glob("*.mlir"))
    assert _check(cli, *paths, "--executor", "ray", "--ray-address", ray_cluster) == _check_here(cli, paths)


@pytest.mark.slow  # 44 s: where the versions compile, not what; the same JAX here and there
def test_suggest_versions_on_ray_are_the_versions_here(cli, ray_cluster):
    assert _suggest(cli, *SUGGEST, "--executor", "ray", "--ray-address", ray_cluster) == _suggest_here(cli)


@pytest.mark.slow  # 41 s, most of it starting Ray: where the versions compile, not what; the same JAX here and there
def test_ray_runtime_started_for_the_run(cli):
    require("ray", "Ray is not installed (pip install 'jax-shard-lint[ray]')")
    import ray

    assert not ray.is_initialized()
    # One target: Ray's start and stop are what is tested; two candidates still go to its two workers.
    run = _sweep(cli, VALUE, "--target", "sharded_on_grid", "--grid", "states=256,512", "--executor", "ray",
                 "--jobs", "2")
    assert run["execution"]["workers"] == 2 and run["execution"]["startup_seconds"] > 0
    assert not ray.is_initialized()  # stopped after the sweep
