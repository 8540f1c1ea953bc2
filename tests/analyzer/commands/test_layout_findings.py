"""SL204 (a constrained value XLA pads) and SL205 (a donation no output reuses), checked against XLA: the
padded per-device shape, the donated buffer's size and what aliases it are read here from the compiled
programs (``compiled.as_text()``, ``memory_analysis()``), and each printed fix is compiled here the way a
user would write it."""

import importlib.util
import json
import os
import re
import sys
import warnings

import jax
import pytest
from ci_deps import needs as requires
from conftest import FIXTURES
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.common.byte_sizes import format_bytes

SCRIPTS = os.path.join(FIXTURES, "scripts")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _script(name):
    spec = importlib.util.spec_from_file_location(f"_layout_{name}", os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, SCRIPTS)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def _targets(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some donated buffers were not usable": what SL205 is about
        return _script(name).shard_lint_targets()


def _lint(cli, name, *args):
    result = cli("lint", os.path.join(SCRIPTS, f"{name}.py"), "--format", "json", "-q", "--fail-on", "never", *args)
    assert result.code == 0, result.err[-2000:]
    return {t["name"]: t for t in json.loads(result.out)["targets"]}


def _peak(compiled):
    m = compiled.memory_analysis()
    return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes


def _entry_parameter_bytes(hlo, number):
    """Per-device bytes of the entry computation's parameter ``number``, from its compiled shape."""
    entry = hlo[hlo.index("\nENTRY "):]
    m = re.search(rf"= f32\[([\d,]+)\]\{{[^}}]*\}} parameter\({number}\)", entry)
    dims = [int(d) for d in m.group(1).split(",")]
    return 4 * dims[0] * dims[1]


def test_sl204_reports_the_padding_xla_compiles(cli):
    hlo = _targets("sl204_uneven_sharding")["uneven"].compile().as_text()
    # XLA pads the 12 rows to a multiple of the 8 shards and slices one piece per device.
    padded = int(re.search(r"= f32\[(\d+),8192\]\{[\d,]*\} pad\(", hlo).group(1))
    rows = padded // 8
    assert padded > 12 and f"f32[{rows},8192]" in hlo
    local = rows * 8192 * 4
    padding = local - 12 * 8192 * 4 // 8
    targets = _lint(cli, "sl204_uneven_sharding")
    (finding,) = targets["uneven"]["findings"]
    assert finding["rule"] == "SL204"
    assert f"each device holds f32[{rows},8192] ({format_bytes(local)})" in finding["message"]
    assert f"{format_bytes(padding)} ({padding / local:.0%}) of it padding" in finding["message"]
    assert targets["even"]["findings"] == []


def test_sl204_fix_is_the_constraint_on_a_dimension_that_divides_measured_better(cli, checking):
    targets = _targets("sl204_uneven_sharding")
    mod = _script("sl204_uneven_sharding")
    uneven = targets["uneven"].compile()
    mesh = mod.mesh()
    fixed = jax.jit(mod.make_scores(mesh, P(None, ("data", "model")))).lower(mod.spec(mesh, (12, 8192), P())).compile()
    fixed_hlo = fixed.as_text()
    assert " pad(" not in fixed_hlo and "f32[12,1024]" in fixed_hlo  # nothing padded: 1024 columns each
    assert _peak(fixed) < _peak(uneven)
    (finding,) = _lint(cli, "sl204_uneven_sharding")["uneven"]["findings"]
    check = finding["fix_check"]
    assert check["verdict"] == "better", finding["fix"]
    assert finding["fix"].startswith("constrain it as P(None, ('data', 'model')) (checked: peak -")
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (_peak(uneven), _peak(fixed))


def test_sl205_a_dtype_change_leaves_the_donation_unused(cli):
    compiled = _targets("sl205_unusable_donation")["recast"].compile()
    hlo = compiled.as_text()
    header = hlo.splitlines()[0]
    assert "buffer_donor={ (0, {}) }" in header and "input_output_alias" not in header
    assert compiled.memory_analysis().alias_size_in_bytes == 0
    donated = _entry_parameter_bytes(hlo, 0)
    targets = _lint(cli, "sl205_unusable_donation")
    (finding,) = targets["recast"]["findings"]
    assert finding["rule"] == "SL205" and finding["subject"] == "params['w']"
    assert f"no output reuses its {format_bytes(donated)} per device" in finding["message"]
    assert "result['w'] has its shape as bf16" in finding["message"]
    assert targets["reused"]["findings"] == []


def test_sl205_a_resharded_output_and_its_pinned_fix_measured_better(cli, checking):
    targets = _targets("unusable_donation_resharded")
    resharded, kept = targets["resharded"].compile(), targets["kept"].compile()
    hlo = resharded.as_text()
    assert "input_output_alias" not in hlo.splitlines()[0]  # jit dropped the donation: nothing aliased
    assert resharded.memory_analysis().alias_size_in_bytes == 0
    donated = _entry_parameter_bytes(hlo, 0)
    # The fix as a user writes it: the output on the input's layout, and XLA writes it into the donated buffer.
    assert kept.memory_analysis().alias_size_in_bytes == donated
    found = _lint(cli, "unusable_donation_resharded")
    assert found["kept"]["findings"] == []
    (finding,) = [f for f in found["resharded"]["findings"] if f["rule"] == "SL205"]
    assert f"no output reuses its {format_bytes(donated)} per device" in finding["message"]
    assert "comes out as P('data')" in finding["message"]
    check = finding["fix_check"]
    assert check["verdict"] == "better", finding["fix"]
    assert finding["fix"].startswith("pin result['w'] with out_shardings to P('data', 'model')")
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (_peak(resharded), _peak(kept))
    # SL201, about the same value, pins the same output with the donation kept: the same measured figures.
    (pinned,) = [f for f in found["resharded"]["findings"] if f["rule"] == "SL201"]
    assert pinned["fix_check"]["peak_bytes_after"] == _peak(kept)


def test_sl204_check_of_a_snapshot_gives_lints_fix(cli, checking, tmp_path):
    """check reads the snapshot's StableHLO alone and compiles the same fix: one recommendation."""
    script = os.path.join(SCRIPTS, "sl204_uneven_sharding.py")
    assert cli("snapshot", script, "-o", str(tmp_path)).code == 0
    checked = cli("check", str(tmp_path / "uneven.mlir"), "--format", "json")
    assert checked.code == 0, checked.err[-2000:]
    (from_check,) = json.loads(checked.out)["targets"][0]["findings"]
    (from_lint,) = _lint(cli, "sl204_uneven_sharding")["uneven"]["findings"]
    assert from_check["rule"] == "SL204" and from_check["fix_check"]["verdict"] == "better"
    assert (from_check["fix"], from_check["message"]) == (from_lint["fix"], from_lint["message"])


def _devices(platform):
    if platform.startswith("tpu"):
        from jax_shard_lint.analyzer.platforms.tpu_targets import resolve_target, tpu_devices

        return tpu_devices(resolve_target(platform, 8, None))
    from jax_shard_lint.analyzer.platforms.gpu_targets import load_target, target_devices

    return target_devices(load_target(platform), 8, 1)


@pytest.mark.parametrize("platform", [
    pytest.param("h100", marks=requires("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda12 is not installed")),
    pytest.param("tpu-v5e", marks=requires("libtpu", "libtpu is not installed")),
])
def test_padding_and_the_lost_donation_on_gpu_and_tpu_targets(cli, platform):
    """XLA pads and drops the donation alike for an H100 and a TPU v5e (compile-only devices)."""
    devices = _devices(platform)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uneven = _script("sl204_uneven_sharding").shard_lint_targets(mesh_devices=devices)["uneven"].compile()
        resharded = _script("unusable_donation_resharded").shard_lint_targets(mesh_devices=devices)["resharded"]
        resharded = resharded.compile()
    hlo = uneven.as_text()
    rows = int(re.search(r"= f32\[(\d+),8192\]\{[^}]*\} pad\(", hlo).group(1)) // 8
    assert f"f32[{rows},8192]" in hlo
    (padded,) = _lint(cli, "sl204_uneven_sharding", "--platform", platform)["uneven"]["findings"]
    assert f"each device holds f32[{rows},8192] ({format_bytes(rows * 8192 * 4)})" in padded["message"]
    assert "input_output_alias" not in resharded.as_text().splitlines()[0]
    assert resharded.memory_analysis().alias_size_in_bytes == 0
    donated = _entry_parameter_bytes(resharded.as_text(), 0)
    found = _lint(cli, "unusable_donation_resharded", "--platform", platform)
    (lost,) = [f for f in found["resharded"]["findings"] if f["rule"] == "SL205"]
    assert f"no output reuses its {format_bytes(donated)} per device" in lost["message"]
    assert found["kept"]["findings"] == []
