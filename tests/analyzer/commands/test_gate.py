"""snapshot, check and gate: fixtures checked in, analysed without running
Python from them, and compared against a baseline."""

import json
import os

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

GATE = os.path.join("fixtures", "gate")
V1, V2, V3 = (os.path.join(GATE, f) for f in ("step_v1.py", "step_v2_allgather.py", "step_v3_peak.py"))


@pytest.fixture
def baseline(cli, tmp_path):
    out = tmp_path / "snap"
    result = cli("snapshot", V1, "-o", str(out))
    assert result.code == 0, result.err
    return out


def test_snapshot_writes_stablehlo_metadata_and_baseline(baseline):
    assert sorted(os.listdir(baseline)) == ["baseline.json", "step.meta.json", "step.mlir"]
    mlir = (baseline / "step.mlir").read_text()
    assert "sdy.sharding" in mlir and "step_v1.py" in mlir  # shardings and source locations
    meta = json.loads((baseline / "step.meta.json").read_text())
    assert meta["mesh"] == {"data": 4, "model": 2} and meta["num_devices"] == 8 and meta["jax_version"]
    data = json.loads((baseline / "baseline.json").read_text())
    assert data["baseline_version"] == 1 and set(data["targets"]) == {"step"}


def test_unchanged_passes_from_the_snapshot_alone(cli, baseline):
    result = cli("gate", "--baseline", str(baseline), "--format", "json")
    assert result.code == 0, result.out + result.err
    assert json.loads(result.out)["passed"] is True


def test_a_new_all_gather_fails_with_its_row_flagged(cli, baseline):
    result = cli("gate", "--baseline", str(baseline), V2, "--format", "json")
    assert result.code == 1
    rows = json.loads(result.out)["rows"]
    flagged = [r for r in rows if r["alert"]]
    assert any(r["metric"].startswith("new all-gather f32[4096, 1024] over data") for r in flagged), flagged
    assert any(r["metric"] == "collective bytes / step" for r in flagged)


def test_a_higher_peak_fails_with_its_row_flagged(cli, baseline):
    result = cli("gate", "--baseline", str(baseline), V3, "--format", "json")
    assert result.code == 1
    flagged = [r for r in json.loads(result.out)["rows"] if r["alert"]]
    # v3 also does more work per step (cumsum, sin, cos, exp): its estimated time rises too.
    assert [r["metric"] for r in flagged] == ["peak bytes / device", "estimated step time (cpu)"]
    assert all(r["after"] > r["before"] for r in flagged)


def test_markdown_table_for_a_pull_request(cli, baseline):
    result = cli("gate", "--baseline", str(baseline), V2, "--format", "markdown")
    assert result.code == 1
    assert result.out.startswith("### jax-shard-lint gate: failed")
    assert "| target | metric | before | after | ratio | alert |" in result.out
    assert "**new all-gather at" in result.out


def test_update_rewrites_the_baseline(cli, baseline):
    assert cli("gate", "--baseline", str(baseline), V3, "--update").code == 0
    assert cli("gate", "--baseline", str(baseline), V3).code == 0


def test_thresholds_are_configurable(cli, baseline):
    assert cli("gate", "--baseline", str(baseline), V3, "--max-peak-increase", "10000%",
               "--max-time-increase", "10000%").code == 0


def test_check_an_xla_dump_directory(cli, tmp_path):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    dump = tmp_path / "dump"
    compiled = jax.jit(lambda a: a.T @ a).lower(x).compile(compiler_options={"xla_dump_to": str(dump)})
    result = cli("check", str(dump), "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    m = compiled.memory_analysis()
    assert t["memory"]["peak_bytes"] == (m.temp_size_in_bytes + m.argument_size_in_bytes
                                        + m.output_size_in_bytes - m.alias_size_in_bytes)
    assert t["collectives"] and all(a.startswith("<") for c in t["collectives"] for a in c["mesh_axes"])
    # The same dump gates against a baseline made from it.
    assert cli("gate", "--baseline", str(tmp_path / "b.json"), str(dump), "--update").code == 0
    assert cli("gate", "--baseline", str(tmp_path / "b.json"), str(dump)).code == 0


def test_check_golden_hlo_and_mlir_fixtures(cli):
    result = cli("check", os.path.join("fixtures", "hlo", "h100_fsdp.hlo"),
                 os.path.join("fixtures", "hlo", "cpu_scan.mlir"), "--format", "json")
    assert result.code == 0, result.err
    t = {x["name"]: x for x in json.loads(result.out)["targets"]}
    assert {c["kind"] for c in t["h100_fsdp"]["collectives"]} >= {"reduce-scatter", "all-gather"}
    assert t["cpu_scan"]["mesh"] == {"data": 4, "model": 2}
    assert not t["h100_fsdp"]["warnings"]


def test_check_says_a_tpu_dumps_memory_leaves_out_the_compilers_scratch(cli):
    """A TPU compile's memory_analysis() counts a scratch area that its buffer assignment does not list
    (the fixture manifest's temp is XLA's own): check reads the dump alone, below it, and says so."""
    with open(os.path.join("fixtures", "hlo", "MANIFEST.json")) as f:
        temp = json.load(f)["tpu_v5e_maxtext"]["memory_analysis"]["temp_bytes"]
    result = cli("check", os.path.join("fixtures", "hlo", "tpu_v5e_maxtext.hlo"), "--format", "json")
    assert result.code in (0, 1), result.err
    [t] = json.loads(result.out)["targets"]
    assert t["memory"]["temp_bytes"] < temp
    assert any("scratch area is not in it" in w for w in t["warnings"])


def test_check_a_jax_export_artifact(cli, tmp_path):
    from jax import export

    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = jax.ShapeDtypeStruct((1024, 256), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    exported = export.export(jax.jit(lambda a: jnp.cumsum(a, axis=0)))(x)
    path = tmp_path / "step.jax_export"
    path.write_bytes(exported.serialize())
    result = cli("check", str(path), "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    assert t["name"] == "step" and "all-gather" in {c["kind"] for c in t["collectives"]}


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a jax-shard-lint baseline: invalid JSON at line 1"),
    ('{"baseline_version": 7}', "baseline version 7 is not supported (this jax-shard-lint reads version 1); "
                                "regenerate it with jax-shard-lint gate --update"),
    ('{"hello": 1}', "not a jax-shard-lint baseline: no baseline_version"),
    ('{"baseline_version": 1, "tool_version": "x", "jax_version": "x", "jaxlib_version": "x", "targets": 3}',
     "not a jax-shard-lint baseline: targets: Input should be a valid dictionary"),
])
def test_corrupt_baselines(cli, tmp_path, content, message):
    path = tmp_path / "baseline.json"
    path.write_text(content)
    result = cli("gate", "--baseline", str(path), V1)
    assert result.code == 2
    assert result.err.strip() == f"jax-shard-lint: error: {path}: {message}"


@pytest.mark.parametrize("name, content, message", [
    ("bad.mlir", "module {", "not a StableHLO module:"),
    ("bad_after_optimizations.txt", "hello", "not compiled HLO text: not an HLO module"),
    ("bad.jax_export", "\x00\x01garbage", "not a jax.export artifact:"),
])
def test_corrupt_fixtures(cli, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    result = cli("check", str(path))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jax-shard-lint: error: {path}: {message}")


def test_missing_baseline_and_empty_dump(cli, tmp_path):
    result = cli("gate", "--baseline", str(tmp_path / "nope.json"), V1)
    assert result.code == 2 and "no such baseline (create one with jax-shard-lint snapshot)" in result.err
    (tmp_path / "empty").mkdir()
    result = cli("check", str(tmp_path / "empty"))
    assert result.code == 2 and "no *after_optimizations.txt in this XLA dump directory" in result.err


def test_assertion_helpers_and_pytest_fixture(shard_lint):
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    local = jax.jit(lambda a: jnp.cumsum(a, axis=1)).lower(x)
    gathering = jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(x)
    shard_lint.assert_no_collectives(local)
    with pytest.raises(AssertionError, match="1 unexpected collective"):
        shard_lint.assert_no_collectives(gathering, kinds=("all-gather",), min_bytes="1MiB")
    shard_lint.assert_no_collectives(gathering, kinds=("all-gather",), min_bytes="1GiB")
    report = shard_lint.assert_peak_below(local, "1GiB")
    with pytest.raises(AssertionError, match="is not below"):
        shard_lint.assert_peak_below(local, report.memory.peak_bytes)


def test_estimated_time_regression_fails_the_gate():
    from jax_shard_lint.passes.compare.gate import compare
    from jax_shard_lint.passes.models.gate import Baseline, BaselineTarget, GateThresholds

    def target(seconds, device="h100"):
        return BaselineTarget(platform="h100", num_devices=8, mesh={"x": 8}, peak_bytes=1, temp_bytes=1,
                              argument_bytes=0, output_bytes=0, alias_bytes=0, collective_bytes=0, bytes_by_kind={},
                              collectives=[], errors=[], step_seconds=seconds, step_time_device=device)

    base = Baseline(tool_version="0", jax_version="0", jaxlib_version="0", targets={"t": target(0.010)})
    slower = compare(base, {"t": target(0.0106)}, GateThresholds(), "b")
    assert not slower.passed
    row = next(r for r in slower.rows if r.metric.startswith("estimated step time"))
    assert row.alert == "estimated step time +6.0% (limit +5%)" and row.display(row.after) == "10.6 ms"
    assert compare(base, {"t": target(0.0106)}, GateThresholds(time_increase=0.1), "b").passed
    # Another device model, or a baseline without an estimate: shown, never failing.
    assert compare(base, {"t": target(0.05, "cpu")}, GateThresholds(), "b").passed
    assert compare(Baseline(tool_version="0", jax_version="0", jaxlib_version="0", targets={"t": target(None)}),
                   {"t": target(0.05)}, GateThresholds(), "b").passed


def _from_other_compilers(baseline_dir, **versions):
    """The snapshot's baseline as another JAX release would have written it."""
    file = baseline_dir / "baseline.json"
    data = json.loads(file.read_text())
    data["compilers"].update(versions)
    file.write_text(json.dumps(data))
    return data


def test_baseline_records_the_compilers(baseline):
    data = json.loads((baseline / "baseline.json").read_text())
    assert data["compilers"]["jax"] == jax.__version__
    import jaxlib

    assert data["compilers"]["jaxlib"] == jaxlib.__version__
    assert data["jax_version"] == data["compilers"]["jax"]


def test_a_gate_across_jax_releases_says_so(cli, baseline):
    _from_other_compilers(baseline, jax="0.0.1", jaxlib="0.0.1")
    same = cli("gate", "--baseline", str(baseline), "--format", "json")
    verdict = json.loads(same.out)
    # Nothing regressed: it passes, and still says what the figures were compared across.
    assert same.code == 0 and verdict["passed"] is True and verdict["rebaselined"] is False
    assert verdict["compiler_change"].startswith("the baseline was compiled with jax 0.0.1, jaxlib 0.0.1; this run "
                                                 f"with jax {jax.__version__}")
    worse = cli("gate", "--baseline", str(baseline), V3, "--format", "markdown")
    assert worse.code == 1
    assert worse.out.startswith("### jax-shard-lint gate: failed, across compiler releases\n\n> **Compilers changed:**")
    text = cli("gate", "--baseline", str(baseline), V3)
    assert text.code == 1 and "Compilers changed" in text.out and "measured across compiler releases" in text.out


def test_rebaseline_on_compiler_change(cli, baseline):
    _from_other_compilers(baseline, jax="0.0.1")
    result = cli("gate", "--baseline", str(baseline), V3, "--rebaseline-on-compiler-change", "--format", "json")
    verdict = json.loads(result.out)
    assert result.code == 0 and verdict["passed"] is True and verdict["rebaselined"] is True
    assert any(r["alert"] for r in verdict["rows"])  # what changed is still shown
    # The baseline now holds this run's figures and compilers: the same program passes with no note.
    again = json.loads(cli("gate", "--baseline", str(baseline), V3, "--format", "json").out)
    assert again["passed"] is True and again["compiler_change"] is None
    # Same compilers, a real regression: the option does not hide it.
    assert cli("gate", "--baseline", str(baseline), V2, "--rebaseline-on-compiler-change").code == 1


def test_compiler_change_names_only_the_compilers_of_the_platform():
    from jax_shard_lint.passes.compare.gate import compiler_change

    before = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42", "jax-cuda12-plugin": "0.10.2"}
    assert compiler_change(before, dict(before), {"cpu (virtual devices)"}) is None
    assert compiler_change({}, before, {"cpu (virtual devices)"}) is None  # a baseline from before versions
    tpu = dict(before, libtpu="0.0.50.1")
    assert compiler_change(before, tpu, {"cpu (virtual devices)"}) is None
    assert "libtpu 0.0.42; this run with libtpu 0.0.50.1" in compiler_change(
        before, tpu, {"tpu-v5p (compiled for 8 x TPU-V5P, topology 2x2x1, without one)"})
    gpu = dict(before, **{"jax-cuda12-plugin": "0.12.0.1"})
    assert "jax-cuda12-plugin 0.10.2" in compiler_change(before, gpu, {"h100 (compiled for 8 x H100 without one)"})
    assert compiler_change(before, gpu, {"tpu-v5p (...)"}) is None


def test_check_takes_a_snapshot_folder(cli, tmp_path):
    """``check DIR`` on what ``snapshot -o DIR`` wrote analyses its fixtures, as ``gate`` does."""
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "cpu_scan.mlir").write_text(open(os.path.join("fixtures", "hlo", "cpu_scan.mlir")).read())
    result = cli("check", str(tmp_path / "snap"), "--format", "json")
    assert result.code in (0, 1), result.err
    assert [t["name"] for t in json.loads(result.out)["targets"]] == ["cpu_scan"]


@pytest.mark.parametrize("option", [("--set", "n=384"), ("--target", "step")])
def test_an_option_of_a_script_without_one_is_an_error(cli, baseline, option):
    # A bare gate re-reads the snapshots, which no --set or --target can change: it would pass a
    # change it never compiled (cfd14 F7).
    result = cli("gate", "--baseline", str(baseline), *option)
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1, result.err
    assert lines[0] == (f"jax-shard-lint: error: {option[0]}: needs a SCRIPT: the fixtures are programs already "
                        "lowered; give the script to gate it with this option")
