"""``run --processes N``: the unmodified script as 1, 2, 4 local JAX processes (a coordinator on
127.0.0.1, Gloo collectives). A replicated device_put of a 64 MiB host array all-gathers
process_count x 64 MiB per device in every process (multihost_utils.assert_equal's tiled
process_allgather); built with make_array_from_callback it moves nothing."""

import json
import os
import textwrap

import numpy as np
from conftest import FIXTURES

from jax_shard_lint.analyzer.commands.run.process_counts import process_counts

RUN = os.path.join(FIXTURES, "multihost", "run")
# The host array both scripts place: np.ones((4096, 4096), np.float32).
TABLE_BYTES = np.ones((4096, 4096), np.float32).nbytes


def _scripts_left(marker):
    """Processes still running a script whose path holds ``marker`` (orphans)."""
    left = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    left.append(pid)
        except OSError:
            continue
    return left


def test_process_counts():
    assert process_counts(1) == [1]
    assert process_counts(4) == [1, 2, 4]
    assert process_counts(6) == [1, 2, 4, 6]


def test_replicated_device_put_allgather_grows_with_the_process_count(cli):
    script = os.path.join(RUN, "replicate_host_array.py")
    result = cli("run", script, "--processes", "4", "--timeout", "300", "--format", "json", "-q")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert [(r["processes"], r["devices_per_process"], r["exit_code"]) for r in report["process_runs"]] == [
        (1, 4, 0), (2, 2, 0), (4, 1, 0)]
    (growing,) = report["growing"]
    assert growing["program"] == "jit__identity_fn" and growing["kind"] == "all-gather"
    assert growing["source"]["line"] == 15  # the script's jax.device_put
    assert growing["bytes_by_processes"] == [[1, 0], [2, 2 * TABLE_BYTES], [4, 4 * TABLE_BYTES]]
    for run in report["process_runs"]:  # every process of a run gathers the same
        assert {p["collective_bytes"] for p in run["per_process"]} == {(run["processes"] > 1) * run["processes"]
                                                                       * TABLE_BYTES}
    (finding,) = [f for f in report["findings"] if f["rule"] == "SL401"]  # measured, the static one merged in
    assert finding["source"]["line"] == 15 and "4 processes: 256.0 MiB" in finding["message"]


def test_make_array_from_callback_moves_nothing_across_processes(cli):
    script = os.path.join(RUN, "replicate_from_callback.py")
    result = cli("run", script, "--processes", "4", "--timeout", "300", "--format", "json", "-q")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["growing"] == [] and report["findings"] == []
    assert all(p["collective_bytes"] == 0 for r in report["process_runs"] for p in r["per_process"])
    hosts = [max(p["peak_host_bytes"] for p in r["per_process"]) for r in report["process_runs"]]
    # Nothing gathered: a process's peak does not grow by a table's copy (a gather of 4 processes adds 4 of
    # them). It need not shrink: CPU device buffers may alias the callback's host array, and the peaks of
    # the 1- and 4-process runs differed by 131,072 B either way across CI runs (allocator noise).
    assert hosts[-1] < hosts[0] + TABLE_BYTES


def test_a_failing_process_exits_4_and_leaves_no_process(cli, tmp_path):
    script = tmp_path / "fails_in_process_1.py"
    script.write_text(textwrap.dedent("""\
        import jax

        jax.distributed.initialize()
        if jax.process_index() == 1:
            raise RuntimeError("process 1 fails")
        print(jax.process_count())
    """))
    result = cli("run", str(script), "--processes", "2", "--timeout", "120", "--format", "json", "-q")
    assert result.code == 4, result.err
    report = json.loads(result.out)
    assert [r["exit_code"] != 0 for r in report["process_runs"]] == [False, True]
    assert report["run"]["error"].startswith("2 processes: process 1: RuntimeError: process 1 fails")
    assert _scripts_left(str(script)) == []


def test_timeout_stops_every_process(cli, tmp_path):
    # The run waits out the timeout once per process count (1, then 2): 5 s each, long enough for the processes
    # to start JAX and its distributed runtime; stopped at the timeout wherever they are, none is left.
    script = tmp_path / "sleeps.py"
    script.write_text("import time\n\nimport jax\n\njax.distributed.initialize()\ntime.sleep(600)\n")
    result = cli("run", str(script), "--processes", "2", "--timeout", "5", "--format", "json", "-q")
    report = json.loads(result.out)
    assert all(r["timed_out"] for r in report["process_runs"]) and report["run"]["timed_out"]
    assert _scripts_left(str(script)) == []


def test_devices_must_be_shared_evenly(cli):
    result = cli("run", os.path.join(RUN, "replicate_host_array.py"), "--processes", "4", "--devices", "6")
    assert result.code == 2
    assert "6 devices cannot be shared evenly by 4 processes" in result.err


def test_fetching_a_sharded_array_fails_only_with_several_processes(cli):
    """np.asarray of an array spanning other processes' devices: SL402 at that line, measured (the run
    as 1 process passes, as 2 fails with JAX's error); the eager NaN check before it is the static
    SL402, its all-reduce one value at every count (nothing grows)."""
    script = os.path.join(RUN, "fetch_sharded.py")
    result = cli("run", script, "--processes", "2", "--devices", "8", "--timeout", "120", "--format", "json", "-q")
    assert result.code == 4, result.err
    report = json.loads(result.out)
    assert [r["exit_code"] == 0 for r in report["process_runs"]] == [True, False]
    assert report["growing"] == []
    lines = sorted((f["source"]["line"], f["rule"]) for f in report["findings"])
    assert lines == [(13, "SL402"), (15, "SL402")]
    (fetch,) = [f for f in report["findings"] if f["source"]["line"] == 15]
    assert "fails with 2 processes and runs with 1" in fetch["message"] and "non-addressable" in fetch["message"]
