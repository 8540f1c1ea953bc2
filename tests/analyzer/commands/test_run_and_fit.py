"""run (an unmodified script, its programs captured through dumps) and fit
(the largest parameter that fits, against brute force)."""

import json
import os

import pytest

TRAIN = os.path.join("examples", "train_loop.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")


def test_run_lints_every_program_the_script_compiles(cli):
    result = cli("run", TRAIN, "--devices", "8", "--format", "json", "--", "--steps", "2")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["command"] == "run" and report["run"]["exit_code"] == 0
    programs = {t["name"]: t for t in report["targets"]}
    assert {"jit_init", "jit_train_step", "jit_loss_fn"} <= set(programs)
    step = programs["jit_train_step"]
    assert step["mesh"] == {"data": 4, "model": 2} and step["call_site"]["line"] == 52
    assert programs["jit_loss_fn"]["call_site"]["line"] == 56
    assert step["collectives"] and step["memory"]["peak_bytes"] > 0
    # The script's source, read without importing it: three habits that bite at scale.
    assert {(f["rule"], f["source"]["line"]) for f in report["findings"]} == {
        ("SL402", 54), ("SL403", 52), ("SL404", 53)}


def test_run_reports_what_was_captured_when_the_script_raises(cli):
    result = cli("run", TRAIN, "--devices", "8", "--only", "train_step", "--format", "json",
                 "--", "--steps", "3", "--fail-at", "2")
    assert result.code == 4  # the script failed: a CI job must not pass
    report = json.loads(result.out)
    assert report["run"]["exit_code"] == 1
    assert report["run"]["timed_out"] is False
    assert report["run"]["error"] == "RuntimeError: data loader failed at step 2"
    assert [t["name"] for t in report["targets"]] == ["jit_train_step"]
    assert any("does not match --only" in s for s in report["run"]["skipped"])


MANY_ARGUMENTS = """import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
params = {f"layer_{i:03d}": jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P("fsdp"))) for i in range(120)}
step = jax.jit(lambda p: jax.tree.map(lambda w: w - 0.1 * jnp.tanh(w.T @ w), p))
step(params)
"""


def test_run_finds_the_partition_count_after_a_long_entry_layout(cli, tmp_path):
    """A step with many parameters (MaxText's) prints its entry_computation_layout before num_partitions:
    the count was searched in the first 2,000 characters, and the sharded step was dropped as one-device."""
    script = tmp_path / "many_arguments.py"
    script.write_text(MANY_ARGUMENTS)
    result = cli("run", str(script), "--devices", "8", "--format", "json", "-q")
    assert result.code in (0, 1), result.err
    report = json.loads(result.out)
    [t] = [t for t in report["targets"] if t["name"] == "jit__lambda"]
    assert t["num_devices"] == 8 and t["collectives"]


def test_run_max_programs_and_missing_script(cli):
    report = json.loads(cli("run", TRAIN, "--devices", "8", "--max-programs", "1", "--format", "json",
                            "--", "--steps", "1").out)
    assert len(report["targets"]) == 1 and any("past --max-programs 1" in s for s in report["run"]["skipped"])
    result = cli("run", "nope.py")
    assert result.code == 2 and result.err.strip() == "jax-shard-lint: error: nope.py: no such file"


@pytest.fixture(scope="module")
def brute_force():
    """Every admissible batch's peak, compiled one by one. Into the run's analysis cache (tests/conftest.py), as
    the fit commands below use it: their probes are among these programs, each compiled once per run (the
    brute force wrote no entry, and fit compiled 7 of its 16 programs again, about 9 CPU s a JAX version)."""
    from jax_shard_lint.analyzer.commands.fit import FitRequest, _Prober
    from jax_shard_lint.analyzer.context.config import Settings

    settings = Settings(cache_dir=os.environ["JAX_SHARD_LINT_CACHE_DIR"])
    prober = _Prober.open(FitRequest(REMAT, "batch", params=("layers=2",)), settings)
    return {b: prober.peak(b) for b in range(4, 68, 4)}


@pytest.mark.parametrize("budget_gib", [0.5, 1.25, 2.0, 100.0])
def test_fit_matches_brute_force(cli, brute_force, budget_gib):
    budget = int(budget_gib * 2**30)
    result = cli("fit", REMAT, "--param", "batch", "--budget", str(budget), "--multiple-of", "4",
                 "--range", "4:64", "--set", "layers=2", "--format", "json")
    fitting = [b for b, p in brute_force.items() if p <= budget]
    answer = json.loads(result.out)
    assert answer["value"] == (max(fitting) if fitting else None)
    if answer["value"] is not None:
        assert result.code == 0
        assert answer["peak_bytes"] == brute_force[answer["value"]]
        if answer["value"] < 64:
            assert answer["next_peak_bytes"] == brute_force[answer["value"] + 4] > budget
        assert len(answer["probes"]) < len(brute_force)
    else:
        assert result.code == 1
    assert all(p["value"] % 4 == 0 for p in answer["probes"])


def test_fit_needs_a_budget_and_a_range(cli):
    result = cli("fit", REMAT, "--param", "batch")
    assert result.code == 2 and "needs a budget: --budget SIZE or --device KIND" in result.err
    result = cli("fit", REMAT, "--param", "batch", "--budget", "1GiB", "--range", "9:3")
    assert result.code == 2 and "--range: expected 1 <= LO <= HI, got 9:3" in result.err


def test_fit_line_holds_for_every_probe_it_names(cli, brute_force):
    """The printed line is fitted over the probes (least squares), not through the first two: every probe
    from line_from_value up is within 3% of it, checked against the peaks XLA gave compiling each value."""
    budget = int(1.25 * 2**30)
    result = cli("fit", REMAT, "--param", "batch", "--budget", str(budget), "--multiple-of", "4",
                 "--range", "4:64", "--set", "layers=2", "--format", "json")
    answer = json.loads(result.out)
    start, a, b = answer["line_from_value"], answer["line_intercept_bytes"], answer["line_slope_bytes"]
    on_line = [p["value"] for p in answer["probes"] if p["value"] >= start]
    assert len(on_line) >= 2
    for v in on_line:
        assert abs(a + b * v - brute_force[v]) <= 0.03 * brute_force[v], (v, a + b * v, brute_force[v])
    text = cli("fit", REMAT, "--param", "batch", "--budget", str(budget), "--multiple-of", "4",
               "--range", "4:64", "--set", "layers=2").out
    assert "fitted line (least squares over " in text


def test_fit_compiles_each_probe_once_and_nothing_after_them(cli, monkeypatch):
    """fit's report is read from its probes: the chosen value and its neighbour are probes, so no compile
    follows the search (no lint of the answer, no second compile of a probed program). Counted at the one
    place fit hands a program to XLA, with the analysis cache off."""
    from jax_shard_lint.analyzer.adapter import jax_adapter

    compiled = []
    real = jax_adapter.compile_lowered

    def counting(lowered, *args, **kwargs):
        compiled.append(jax_adapter.stablehlo_text(lowered))
        return real(lowered, *args, **kwargs)

    monkeypatch.setattr(jax_adapter, "compile_lowered", counting)
    monkeypatch.setattr(jax_adapter, "compile_stablehlo_text",
                        lambda *a, **k: pytest.fail("fit compiled a program from its text"))
    result = cli("fit", REMAT, "--param", "batch", "--budget", str(int(1.25 * 2**30)), "--multiple-of", "4",
                 "--range", "4:64", "--set", "layers=2", "--format", "json", "--no-cache")
    assert result.code == 0, result.err[-2000:]
    answer = json.loads(result.out)
    probed = [p["value"] for p in answer["probes"]]
    assert len(compiled) == len(probed) == len(set(compiled))
    assert answer["value"] in probed and answer["next_value"] in probed
