"""SL204 (a constrained value XLA pads) and SL205 (a donation no output reuses), checked against XLA: the
padded per-device shape, the donated buffer's size and what aliases it are read here from the compiled
programs (``compiled.as_text()``, ``memory_analysis()``), and each printed fix is compiled here the way a
user would write it."""

import json
import os
import re
import warnings

import jax
import pytest
from ci_deps import needs as requires
from conftest import FIXTURES
from hlo_oracle import compiled_collectives, xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.passes.common.byte_sizes import format_bytes

SCRIPTS = os.path.join(FIXTURES, "scripts")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _script(name):
    return script_module(os.path.join(SCRIPTS, f"{name}.py"))


def _targets(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some donated buffers were not usable": what SL205 is about
        return _script(name).shard_lint_targets()


def _lint(cli, name, *args):
    result = cli("lint", os.path.join(SCRIPTS, f"{name}.py"), "--format", "json", "-q", "--fail-on", "never", *args)
    assert result.code == 0, result.err[-2000:]
    return {t["name"]: t for t in json.loads(result.out)["targets"]}



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
    assert xla_peak(fixed) < xla_peak(uneven)
    (finding,) = _lint(cli, "sl204_uneven_sharding")["uneven"]["findings"]
    check = finding["fix_check"]
    assert check["verdict"] == "better", finding["fix"]
    assert finding["fix"].startswith("constrain it as P(None, ('data', 'model')) (checked: peak -")
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(uneven), xla_peak(fixed))


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


def test_sl205_dropping_an_unusable_donation_is_compiled_and_said_to_change_nothing(cli, checking):
    """Two arguments of one layout donated for one output: XLA writes it into one, the other's donation is
    reused by nothing. Dropping that donation (the program jit lowers without it in donate_argnums) is
    compiled here: XLA measures the same peak and the same collectives, so it is never printed as the fix,
    and the finding says what it was measured to change, with XLA's figures."""
    mod = _script("sl205_unusable_donation")
    both = _targets("sl205_unusable_donation")["both_donated"].compile()
    header = both.as_text().splitlines()[0]
    assert "input_output_alias={ {}: (0, {}, may-alias) }" in header and "buffer_donor={ (1, {}) }" in header
    m = mod.mesh()
    params = {"w": mod.spec(m, (4096, 4096), P("data", "model"))}
    grads = {"w": mod.spec(m, (4096, 4096), P("data", "model"))}
    dropped = jax.jit(mod.step_both_donated, donate_argnums=(0,)).lower(params, grads).compile()
    assert "buffer_donor" not in dropped.as_text().splitlines()[0]
    assert xla_peak(dropped) == xla_peak(both)
    assert compiled_collectives(dropped.as_text(), 8) == compiled_collectives(both.as_text(), 8) == {}
    (finding,) = _lint(cli, "sl205_unusable_donation")["both_donated"]["findings"]
    assert finding["rule"] == "SL205" and finding["subject"] == "grads['w']"
    check = finding["fix_check"]
    assert check["change"] == "grads['w'] dropped from donate_argnums"
    assert check["verdict"] == "no-change"
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(both), xla_peak(dropped))
    assert finding["fix"].startswith("no fix measured better: grads['w'] dropped from donate_argnums was tried, "
                                     "compiled and measured no change (peak ±0 B, traffic ±0 B")
    assert finding["fix"].endswith("the donation buys the step nothing, so dropping it changes only that JAX no "
                                   "longer deletes the caller's array")
    assert finding["suggested_sharding"] is None


def test_a_resharded_donated_output_is_one_finding_with_its_measured_fix(cli, checking):
    """The state donated and returned on another sharding is one cause: the output comes back on another
    layout (SL201), jit drops its donation (SL205) and XLA gathers it at the program's end (the all-gather
    SL101 would report with no line). One finding says the three, with the one fix, measured."""
    targets = _targets("unusable_donation_resharded")
    resharded, kept = targets["resharded"].compile(), targets["kept"].compile()
    hlo = resharded.as_text()
    assert "input_output_alias" not in hlo.splitlines()[0]  # jit dropped the donation: nothing aliased
    assert resharded.memory_analysis().alias_size_in_bytes == 0
    donated = _entry_parameter_bytes(hlo, 0)
    gathers = re.findall(r"%(all-gather[\w.-]*) = ", hlo)
    # The fix as a user writes it: the output on the input's layout, and XLA writes it into the donated buffer.
    assert kept.memory_analysis().alias_size_in_bytes == donated
    found = _lint(cli, "unusable_donation_resharded")
    assert found["kept"]["findings"] == []
    (finding,) = found["resharded"]["findings"]
    assert finding["rule"] == "SL201" and finding["parameter"] == "params['w']"
    assert "comes back as P('data') but its input params['w'] is P('data', 'model')" in finding["message"]
    assert f"no output reuses its {format_bytes(donated)} per device (SL205" in finding["message"]
    assert finding["ops"] == gathers and len(gathers) == 1
    check = finding["fix_check"]
    assert check["verdict"] == "better", finding["fix"]
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(resharded), xla_peak(kept))


def test_check_of_a_snapshot_gives_lints_one_finding_for_the_resharded_donation(cli, checking, tmp_path):
    """jit drops the donation before the module is written: the snapshot records it beside the module, so
    check finds the lost donation and measures the pinned fix with the donation restored, as lint does."""
    script = os.path.join(SCRIPTS, "unusable_donation_resharded.py")
    assert cli("snapshot", script, "-o", str(tmp_path)).code == 0
    assert json.loads((tmp_path / "resharded.meta.json").read_text())["donated_inputs"] == [0]
    checked = cli("check", str(tmp_path / "resharded.mlir"), "--format", "json")
    assert checked.code == 0, checked.err[-2000:]
    (from_check,) = json.loads(checked.out)["targets"][0]["findings"]
    (from_lint,) = _lint(cli, "unusable_donation_resharded")["resharded"]["findings"]
    for key in ("rule", "message", "fix", "fix_check", "ops", "parameter"):
        assert from_check[key] == from_lint[key], key
    kept = _targets("unusable_donation_resharded")["kept"].compile()
    assert from_check["fix_check"]["peak_bytes_after"] == xla_peak(kept)


def test_sl205_alone_where_sl201_is_ignored(cli, checking):
    targets = _targets("unusable_donation_resharded")
    resharded, kept = targets["resharded"].compile(), targets["kept"].compile()
    donated = _entry_parameter_bytes(resharded.as_text(), 0)
    found = _lint(cli, "unusable_donation_resharded", "--ignore", "SL201", "--ignore", "SL101")
    (finding,) = found["resharded"]["findings"]
    assert finding["rule"] == "SL205"
    assert f"no output reuses its {format_bytes(donated)} per device" in finding["message"]
    assert "comes out as P('data')" in finding["message"]
    assert finding["fix"].startswith("pin result['w'] with out_shardings to P('data', 'model')")
    check = finding["fix_check"]
    assert check["verdict"] == "better", finding["fix"]
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(resharded), xla_peak(kept))


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
    (lost,) = found["resharded"]["findings"]
    assert lost["rule"] == "SL201" and f"no output reuses its {format_bytes(donated)} per device" in lost["message"]
    assert found["kept"]["findings"] == []


def _aliased_paths(lowered, compiled):
    """XLA's own pairing, as paths: the compiled program's input_output_alias (output index -> parameter
    number) named by JAX's pytree paths of the step's arguments and results."""
    args, out_tree = lowered.args_info[0], lowered.out_info
    header = compiled.as_text().splitlines()[0]
    names = ("params", "opt_state", "grads")
    flat_in = jax.tree_util.tree_flatten_with_path(args)[0]
    in_paths = [names[p[0].idx] + jax.tree_util.keystr(p[1:]) for p, _ in flat_in]
    out_paths = ["result" + jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(out_tree)[0]]
    pairs = re.findall(r"\{(\d+)\}: \((\d+), \{\}", header[header.index("input_output_alias"):])
    return {in_paths[int(i)]: out_paths[int(o)] for o, i in pairs}


def test_sl205_pins_each_donated_value_to_the_output_that_is_it(cli, checking):
    """Four donated state values of one shape and dtype, each on its own sharding, all returned replicated:
    each finding pins the output that is its input coming back. The oracle is XLA's pairing when the
    outputs are pinned to their inputs' layouts (``kept``), read from its input_output_alias."""
    lowered = _targets("donated_state_same_shapes")
    expected = _aliased_paths(lowered["kept"], lowered["kept"].compile())
    assert len(expected) == 4 and len(set(expected.values())) == 4
    replicated = lowered["replicated"].compile().as_text().splitlines()[0]
    assert "input_output_alias" not in replicated  # jit dropped every donation
    found = _lint(cli, "donated_state_same_shapes", "--ignore", "SL201", "--ignore", "SL101", "--ignore", "SL105")
    assert found["kept"]["findings"] == []
    findings = [f for f in found["replicated"]["findings"] if f["rule"] == "SL205"]
    assert sorted(f["subject"] for f in findings) == sorted(expected)
    for f in findings:
        out = expected[f["subject"]]
        assert f"{f['subject']} is donated, but no output reuses" in f["message"]
        assert f": {out} has its shape and dtype but comes out as P()" in f["message"], f["message"]
        assert f["fix"].startswith(f"pin {out} with out_shardings to "), f["fix"]
        check = f["fix_check"]
        assert check["change"].startswith(f"out_shardings pinning {out} to "), check["change"]
        assert check["change"].endswith(f", {f['subject']} donated")
        assert check["verdict"] == "better", f["fix"]


def test_sl201_and_sl205_name_each_state_value_with_its_own_output(cli):
    """With SL201 on, the lost donation is one finding with the output that comes back: each names its own."""
    lowered = _targets("donated_state_same_shapes")
    expected = _aliased_paths(lowered["kept"], lowered["kept"].compile())
    found = _lint(cli, "donated_state_same_shapes")["replicated"]["findings"]
    state = {f["parameter"]: f for f in found if f["rule"] in ("SL201", "SL205")}
    assert set(expected) <= {p for f in state.values() for p in (f["parameters"] or [f["parameter"]])}
    for f in found:
        for name in re.findall(r"\b(?:params|opt_state)\['\w+'\]", f["message"]):
            assert expected[name] in f["message"] or f["rule"] not in ("SL201", "SL205"), f["message"]


def test_sl205_of_every_layer_pins_each_layers_output(cli, checking, monkeypatch):
    """Two layers' weights donated and returned replicated are one finding (params['h'][*]) whose fix pins
    each layer's own output: compiled, it is the program with both outputs pinned (``layers_kept``)."""
    lowered = _targets("donated_state_same_shapes")
    kept = lowered["layers_kept"].compile()
    assert len(_aliased_paths(lowered["layers_kept"], kept)) == 2  # pinned, XLA reuses both donated buffers
    found = _lint(cli, "donated_state_same_shapes", "--target", "layers", "--ignore", "SL201", "--ignore", "SL101",
                  "--ignore", "SL105", "--ignore", "SL202")
    (f,) = found["layers"]["findings"]
    assert f["rule"] == "SL205" and f["count"] == 2 and f["parameter"] == "params['h'][*]"
    assert ": result['h'][*] has its shape and dtype but comes out as P()" in f["message"], f["message"]
    assert f["fix_check"]["change"] == "out_shardings pinning result['h'][*] to P('data'), params['h'][*] donated"
    assert f["fix_check"]["verdict"] == "better"
    assert f["fix_check"]["peak_bytes_after"] == xla_peak(kept)
    monkeypatch.setenv("COLUMNS", "200")
    terminal = cli("lint", os.path.join(SCRIPTS, "donated_state_same_shapes.py"), "--target", "layers", "-q",
                   "--fail-on", "never", "--ignore", "SL201")
    (param,) = [line for line in terminal.out.splitlines() if "param:" in line]
    assert param.split("param:")[1].strip() == "params['h'][*] P('data')"  # the layout it keeps: no arrow
