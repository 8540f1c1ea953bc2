"""Compiling for GPU targets on this CPU-only machine (JAX's CUDA PJRT plugin,
installed by CI through the [gpu] extra; skipped where it is absent)."""

import json
import os
import re

import pytest
from ci_deps import require

require("jax_plugins.xla_cuda12", "the [gpu] extra (jax-cuda12-plugin) is not installed", allow_module_level=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from conftest import lint_targets  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jax_shard_lint.analyzer.platforms.gpu_targets import GPU_TARGETS, load_target, target_devices  # noqa: E402

FSDP = os.path.join("examples", "fsdp_tp_train_step.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")


def _small_step(devices):
    mesh = Mesh(np.array(devices).reshape(4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    spec = jax.ShapeDtypeStruct((512, 256), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    return jax.jit(lambda w: jnp.tanh(w @ w.T).sum(0)).lower(spec)


@pytest.mark.parametrize("name", GPU_TARGETS)
def test_every_bundled_spec_parses_and_compiles(name):
    target = load_target(name)
    assert target.memory_bytes and target.memory_bytes > 30 * 2**30
    devices = target_devices(target, 8, 1)
    assert len(devices) == 8 and devices[0].platform == "gpu"
    compiled = _small_step(devices).compile()
    assert compiled.memory_analysis().temp_size_in_bytes > 0
    # The step's collectives are there (async starts up to XLA 0.10; XLA 0.12 leaves some synchronous).
    assert re.search(r" (all-reduce|all-gather|reduce-scatter)(-start)?\(", compiled.as_text())


def test_gpu_compile_gives_reduce_scatters_and_async_collectives(cli):
    [cpu] = lint_targets(cli, FSDP)
    [gpu] = lint_targets(cli, FSDP, "--platform", "h100")
    assert gpu["platform"].startswith("h100") and cpu["platform"].startswith("cpu")
    assert "reduce-scatter" in {c["kind"] for c in gpu["collectives"]}
    assert "reduce-scatter" not in {c["kind"] for c in cpu["collectives"]}
    # Async as XLA compiled it: every collective on XLA 0.10, some on 0.12 (it leaves some synchronous).
    assert any(c["is_async"] for c in gpu["collectives"])
    assert all(c["is_async"] == ("-start" in c["hlo_name"]) for c in gpu["collectives"] + cpu["collectives"])
    assert not any(c["is_async"] for c in cpu["collectives"])


def test_peak_comes_from_the_gpu_compile(cli):
    [t] = lint_targets(cli, REMAT, "--platform", "h100", "--set", "batch=16")
    # The same program compiled directly for the same target: XLA's own figures.
    import sys

    sys.path.insert(0, "examples")
    try:
        import remat_layer_stack
    finally:
        sys.path.remove("examples")
    devices = target_devices(load_target("h100"), 8, 1)
    lowered = remat_layer_stack.shard_lint_targets(batch=16, mesh_devices=devices)["train_step"]
    m = lowered.compile().memory_analysis()
    assert t["memory"]["peak_bytes"] == (m.temp_size_in_bytes + m.argument_size_in_bytes
                                        + m.output_size_in_bytes - m.alias_size_in_bytes)
    assert t["memory"]["budget_bytes"] == load_target("h100").memory_bytes  # defaults to the target's memory


def test_hosts_class_collectives_within_or_across_hosts(cli):
    [t] = lint_targets(cli, FSDP, "--platform", "h100", "--hosts", "2")
    assert t["axis_scope"] == {"fsdp": "cross-host", "tp": "within-host"}
    for c in t["collectives"]:
        if c["mesh_axes"] == ["fsdp"]:
            assert c["cross_host"] is True
        elif c["mesh_axes"] == ["tp"]:
            assert c["cross_host"] is False


def test_user_target_config(cli, tmp_path):
    spec = load_target("h100").spec_text.replace("device_memory_size: 84978434048", "device_memory_size: 1073741824")
    path = tmp_path / "small_h100.txtpb"
    path.write_text(spec)
    [t] = lint_targets(cli, REMAT, "--platform", "h100", "--target-config", str(path), "--set", "batch=16")
    assert t["memory"]["budget_bytes"] == 1073741824
    assert "SL301" in {f["rule"] for f in t["findings"]}


def test_script_that_ignores_the_tools_devices(cli):
    script = os.path.join("fixtures", "scripts", "sl203_replicated_argument.py")
    result = cli("lint", script, "--platform", "h100")
    assert result.code == 2
    assert "target 'replicated' was lowered for CPU devices, not the h100's" in result.err


def test_cpu_figures_against_a_gpu_budget_warn(cli):
    [t] = lint_targets(cli, REMAT, "--device", "h100", "--set", "batch=8")
    assert t["warnings"] and "--platform h100" in t["warnings"][0]


def test_missing_plugin_is_one_clear_line(cli, monkeypatch):
    from jax_shard_lint.analyzer.adapter import jax_adapter

    def missing(*_args, **_kwargs):
        raise ImportError("the CUDA PJRT plugin (jax-cuda12-plugin) is not installed")

    monkeypatch.setattr(jax_adapter, "gpu_target_devices", missing)
    result = cli("lint", FSDP, "--platform", "b200")
    assert result.code == 2
    assert result.err.strip() == ('jax-shard-lint: error: --platform b200: compiling for a GPU target needs the CUDA '
                                  'PJRT plugin: pip install "jax-shard-lint[gpu]"')


def test_rewrite_and_propagate_compile_for_the_target(cli):
    script = os.path.join("fixtures", "scripts", "sl201_output_sharding_mismatch.py")
    result = cli("rewrite", script, "--target", "unpinned", "--platform", "h100", "--validate", "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    assert t["platform"].startswith("h100") and any(c["is_async"] for c in t["after"]["collectives"])
    assert t["validation"]["ran"] is False and "without one" in t["validation"]["reason"]
    result = cli("propagate", os.path.join("examples", "value_function_step.py"), "--platform", "h100",
                 "--target", "sharded_on_grid", "--format", "json")
    [p] = json.loads(result.out)["targets"]
    assert any(x["matched_compiled"] for x in p["predicted"])


def test_snapshots_are_gated_on_the_platform_they_were_taken_on(cli, tmp_path):
    out = tmp_path / "snap"
    assert cli("snapshot", REMAT, "--platform", "h100", "--set", "batch=8", "-o", str(out)).code == 0
    result = cli("gate", "--baseline", str(out), "--format", "json")
    assert result.code == 0, result.out
    assert json.loads(result.out)["passed"]
    # Checking the same snapshot on CPU says the figures are not the GPU's.
    [t] = lint_json_check(cli, str(out / "train_step.mlir"))
    assert t["platform"].startswith("cpu") and "use --platform h100" in t["warnings"][0]


def lint_json_check(cli, *paths):
    result = cli("check", *paths, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    return json.loads(result.out)["targets"]


def test_every_fft_gather_on_an_h100_is_one_finding(cli):
    """An H100's gathers are async (all-gather-start/-done), combined into tuples, and transposed before cuFFT:
    the FFT behind each went unseen, so jax-cfd's one cause (the vorticity split on a dimension every FFT
    transforms) was three SL101s and several SL105s on --platform h100, where the CPU gives one SL101 (cfd14 F5,
    F12). XLA's own h100 compile of the fixture gives the gathers the finding must hold, every one."""
    from scripts import script_targets
    script = os.path.join("fixtures", "scripts", "spectral_batch_on_grid_axis.py")
    devices = target_devices(load_target("h100"), 8, 1)
    text = script_targets(script, mesh_devices=devices)["on_grid"].compile().as_text()
    gathers = set(re.findall(r"%(all-gather(?:-start)?[.\d]*) = \S.* all-gather(?:-start)?\(", text))
    # Every FFT's operand gathered before it is transformed (jax 0.10.2: 6 gathers at 5 lines; XLA 0.12 keeps
    # some local: 2 at 2 lines).
    assert len(gathers) >= 2, gathers
    [t] = lint_targets(cli, script, "--platform", "h100", "--target", "on_grid", "--no-fix-check")
    assert [f["rule"] for f in t["findings"]] == ["SL101"], t["findings"]
    assert set(t["findings"][0]["ops"]) == gathers
    assert t["findings"][0]["parameter"] == "vorticity_hat"
