"""The CLI end to end on the bundled examples, with 8 virtual devices."""

import json
import os

import pytest
from conftest import EXAMPLES, ROOT

FSDP = os.path.join("examples", "fsdp_tp_train_step.py")
VALUE = os.path.join("examples", "value_function_step.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")


def lint_json(cli, *args):
    result = cli("lint", *args, "--format", "json", "-q")
    assert result.code in (0, 1), result.err
    return json.loads(result.out), result.code


def test_json_carries_the_documented_fields(cli):
    report, _ = lint_json(cli, FSDP)
    assert report["schema_version"] == "1.1"
    t = report["targets"][0]
    assert t["name"] == "train_step" and t["num_devices"] == 8 and t["mesh"] == {"fsdp": 4, "tp": 2}
    assert set(t["memory"]) >= {"peak_bytes", "argument_bytes", "output_bytes", "temp_bytes", "alias_bytes",
                                "budget_bytes", "live_at_peak"}
    assert set(t["memory"]["live_at_peak"][0]) >= {"bytes", "shape", "source"}
    assert set(t["collectives"][0]) >= {"kind", "bytes", "count", "mesh_axes", "shape", "op_name", "source"}
    assert set(t["inputs"][0]) >= {"path", "shape", "dtype", "sharding", "donated"}
    assert set(t["findings"][0]) >= {"rule", "severity", "message", "source", "fix"}
    # Never XLA's internal axis names.
    assert all(not a.startswith("axis_") for c in t["collectives"] for a in c["mesh_axes"])
    # The layer scan runs 8 layers: its collectives say so.
    assert {c["count"] for c in t["collectives"]} >= {8}
    assert t["inputs"][0] == {
        "index": 0, "path": "params['embed']", "shape": [32768, 1024], "dtype": "f32", "sharding": [[], []],
        "donated": False, "bytes": 134217728, "per_device_bytes": 134217728,
    }


def test_fsdp_example_findings(cli):
    report, code = lint_json(cli, FSDP)
    rules = {f["rule"] for f in report["targets"][0]["findings"]}
    assert {"SL201", "SL202", "SL203"} <= rules
    assert code == 0  # warnings only; --fail-on defaults to error
    assert "out_shardings=" in report["targets"][0]["suggested_out_shardings"]


def test_value_function_example_shows_the_interpolation_cost(cli):
    report, _ = lint_json(cli, VALUE)
    by_name = {t["name"]: t for t in report["targets"]}
    grid, states = by_name["sharded_on_grid"], by_name["sharded_on_states"]
    assert "SL101" in {f["rule"] for f in grid["findings"]}
    assert not states["collectives"]
    assert grid["memory"]["peak_bytes"] > 4 * states["memory"]["peak_bytes"]


def test_budget_and_device_presets(cli):
    report, code = lint_json(cli, REMAT, "--set", "batch=64", "--budget", "1GiB")
    assert code == 1 and report["targets"][0]["memory"]["budget_bytes"] == 2**30
    assert "SL301" in {f["rule"] for f in report["targets"][0]["findings"]}
    report, code = lint_json(cli, REMAT, "--set", "batch=8", "--device", "h100")
    # One memory size per device: --device h100 is the H100 target spec's device_memory_size.
    import re

    spec = open(os.path.join(ROOT, "analyzer", "data", "gpu_targets", "h100.txtpb")).read()
    assert report["targets"][0]["memory"]["budget_bytes"] == int(re.search(r"device_memory_size: (\d+)", spec).group(1))


def test_peak_grows_with_the_batch_param(cli):
    small, _ = lint_json(cli, REMAT, "--set", "batch=16")
    large, _ = lint_json(cli, REMAT, "--set", "batch=64")
    assert large["targets"][0]["memory"]["peak_bytes"] > small["targets"][0]["memory"]["peak_bytes"]


def test_fail_on_warning_and_never(cli):
    assert cli("lint", FSDP, "-q", "--fail-on", "warning", "--format", "json").code == 1
    assert cli("lint", FSDP, "-q", "--fail-on", "never", "--format", "json").code == 0


def test_target_selection(cli):
    report, _ = lint_json(cli, VALUE, "--target", "sharded_on_states")
    assert [t["name"] for t in report["targets"]] == ["sharded_on_states"]


def test_json_is_byte_identical_across_runs(cli):
    first = cli("lint", VALUE, "--format", "json", "-q").out
    second = cli("lint", VALUE, "--format", "json", "-q").out
    assert first == second


def test_terminal_report(cli):
    result = cli("lint", VALUE)
    assert result.code == 0
    for text in ("sharded_on_grid", "Collectives", "Live at the peak", "SL101", "fix:", "cpu (virtual devices)"):
        assert text in result.out
    assert result.err == ""  # progress goes to terminals only
    assert "\x1b[" not in result.out  # no colour when not a terminal


def test_output_file_and_quiet(cli, tmp_path):
    out = tmp_path / "report.json"
    result = cli("lint", VALUE, "--format", "json", "-o", str(out), "-q")
    assert result.out == "" and result.err == ""
    assert json.loads(out.read_text())["targets"]


def test_thresholds_and_ignore_from_the_command_line(cli):
    report, _ = lint_json(cli, FSDP, "--ignore", "SL203", "--threshold", "donation-min-bytes=1GiB")
    rules = {f["rule"] for f in report["targets"][0]["findings"]}
    assert "SL203" not in rules and "SL202" not in rules


def test_config_from_pyproject(cli, tmp_path):
    script = tmp_path / "fsdp.py"
    script.write_text(open(os.path.join(EXAMPLES, "fsdp_tp_train_step.py")).read())
    (tmp_path / "pyproject.toml").write_text(
        '[tool.jax-shard-lint]\nbudget = "1GiB"\nignore = ["SL203"]\n\n'
        '[tool.jax-shard-lint.severity]\nSL201 = "error"\n'
    )
    report, code = lint_json(cli, str(script))
    t = report["targets"][0]
    assert t["memory"]["budget_bytes"] == 2**30
    assert "SL203" not in {f["rule"] for f in t["findings"]}
    assert {f["severity"] for f in t["findings"] if f["rule"] == "SL201"} == {"error"}
    assert code == 1


def test_module_function_entry_point(cli):
    report, _ = lint_json(cli, VALUE + ":shard_lint_targets", "--target", "sharded_on_states")
    assert report["targets"][0]["name"] == "sharded_on_states"


def test_rules_and_rule_commands(cli):
    result = cli("rules")
    assert result.code == 0 and "SL101" in result.out and "replicating-collective" in result.out
    result = cli("rule", "SL201")
    assert result.code == 0
    for section in ("What it does", "Why is this bad", "Example", "Fix"):
        assert section in result.out
    assert cli("rule", "missing-donation").code == 0


@pytest.mark.parametrize("argv", [["--version"]])
def test_version(cli, argv):
    with pytest.raises(SystemExit) as e:
        cli(*argv)
    assert e.value.code == 0
