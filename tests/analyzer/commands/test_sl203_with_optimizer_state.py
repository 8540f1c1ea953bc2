"""SL203 judges a replicated parameter with its optimizer state (one decision, one finding once grouped): the
group's total against the threshold. Its fix, like every fix, is compiled and printed only when measured
better (analyzer/backend/fix_checks.py)."""

import json
import os

import jax
import pytest
from hlo_oracle import xla_peak
from scripts import script_module


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _fixture(name):
    path = os.path.join("fixtures", "scripts", f"{name}.py")
    return path, script_module(path)


def _lint(cli, *args):
    result = cli("lint", *args, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    return json.loads(result.out)


def _abstract(lowered):
    """The Lowered's positional arguments as ShapeDtypeStructs with their compiled shardings."""
    compiled = lowered.compile()
    return jax.tree.map(lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
                        lowered.args_info[0], compiled.input_shardings[0])


def test_sl203_judges_a_parameter_with_its_optimizer_state(cli, checking):
    """A replicated embedding of BERT's size (f32[30522, 256], 29.8 MiB) and its two Adam moments: each is under
    SL203's 64 MiB, the three (one decision, one finding) are 89.4 MiB, so SL203 reports them. Its fix is
    printed only when measured better: a layout it offers compiles, in XLA, to a lower peak than as written."""
    script, module = _fixture("replicated_embedding_with_moments")
    report = _lint(cli, script, "--target", "replicated")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL203"]
    assert f["parameter"] == "params['emb']", f
    one = 30522 * 256 * 4
    assert one < 64 * 1024**2 <= 3 * one
    assert f["message"].startswith("argument params['emb'] (f32[30522, 256], 29.8 MiB) is replicated on all 8 "
                                   "devices (with the 2 replicated values of its key path and shape, 89.4 MiB)"), f
    assert sorted(f["parameters"]) == ["opt_state['mu']['emb']", "opt_state['nu']['emb']", "params['emb']"]
    check = f["fix_check"]
    assert check is not None
    offered = f["fix"].startswith("shard params['emb']")
    assert offered == (check["verdict"] == "better"), f["fix"]
    if offered:
        params, opt_state, ids = _abstract(module.shard_lint_targets()["replicated"])
        as_written = jax.jit(module.step, donate_argnums=(0, 1)).lower(params, opt_state, ids).compile()
        assert check["peak_bytes_before"] == xla_peak(as_written)
        assert check["peak_bytes_after"] < xla_peak(as_written)
