"""The malformed-input corpus (fixtures/bad_input/corpus, from its generate.py):
every case gives its exit code and its exact one-line message, under a memory
limit and a time limit, and none crashes or hangs the harness.

The cases run in tests/analyzer/cli/hostile_harness.py, in a child process: a regression
into a native crash kills that child, not the test run; the driver below then
records the case that was running and starts a new harness for the rest.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

HARNESS = os.path.join(ROOT, "tests", "analyzer", "cli", "hostile_harness.py")
CASES_FILE = os.path.join(ROOT, "fixtures", "bad_input", "corpus", "cases.json")
with open(CASES_FILE, encoding="utf-8") as _f:
    CASES = json.load(_f)


def _run_all(tmp_dir: str) -> dict[str, dict]:
    results: dict[str, dict] = {}
    remaining = [c["id"] for c in CASES]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    attempt = 0
    while remaining:
        attempt += 1
        out = os.path.join(tmp_dir, f"results-{attempt}.jsonl")
        done = subprocess.run([sys.executable, HARNESS, out, *remaining], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1200)
        started = None
        with open(out, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("started"):  # an in-process case; the supervised ones' lines come between
                    started = record["id"]
                else:
                    results[record["id"]] = record
                    if record["id"] == started:
                        started = None
        if started is not None:  # the harness died inside this case
            results[started] = {"id": started, "exit": done.returncode, "stdout": "",
                                "stderr": f"harness died ({done.returncode}): {done.stderr[-1500:]}"}
        elif done.returncode != 0:
            pytest.fail(f"harness failed outside a case: {done.stderr[-3000:]}")
        left = [i for i in remaining if i not in results]
        if len(left) == len(remaining):
            pytest.fail(f"the harness ran none of {left[:3]}...: {done.stderr[-2000:]}")
        remaining = left
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run_all(str(tmp_path_factory.mktemp("hostile")))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_case(results, case):
    got = results[case["id"]]
    err = got["stderr"].strip()
    if case["exit"] is None:  # damaged input: a clean run, findings, or one line; never a bug, crash or hang
        assert got["exit"] in (0, 1, 2), f"exit {got['exit']}: {err[-2000:]}"
    else:
        assert got["exit"] == case["exit"], f"exit {got['exit']}: {err[-2000:]}"
    assert "Traceback" not in err
    if got["exit"] == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err[-2000:]
        if case["message"] is not None and case["exit"] == 2:
            assert lines[0] == "jax-shard-lint: error: " + case["message"].replace("{root}", ROOT)
        else:
            assert lines[0].startswith("jax-shard-lint: error: ")
    if case["stdout_has"]:
        assert case["stdout_has"] in got["stdout"]
    for raw in case["stdout_lacks"]:
        assert raw not in got["stdout"]


def test_corpus_is_what_its_generator_writes(tmp_path):
    """cases.json is generated, not edited by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("corpus_generate", CASES_FILE.replace("cases.json", "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()
    module.mutations()
    assert module.CASES == CASES
