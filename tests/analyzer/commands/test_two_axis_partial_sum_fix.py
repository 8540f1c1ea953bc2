"""SL103 on a weight sharded on both mesh axes (issue 46: GPT-J's lm_head P('data', 'model') got a fix with no
spec and no check): the contracted dimension's axis has no unsharded dimension to go to alone, so the rule's
candidates move it beside 'model' on the vocabulary, or drop it, and the fix check compiles them in order. The
printed fix's figures are XLA's compile of that layout here, with jax.jit: memory_analysis()'s peak and the
compiled text's collectives (the step returns a scalar: no state comes back on another layout)."""

import json
import os

import jax
import pytest
from hlo_oracle import collectives_per_step, xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "sl103_two_axis_head.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _figures(module, w_spec):
    m = module.mesh()
    compiled = jax.jit(module.head_loss).lower(
        module.spec(m, (2048, 8192), w_spec), module.spec(m, (8, 32, 2048), P()),
        module.spec(m, (8, 32), P(), jax.numpy.int32)).compile()
    traffic = sum(b * runs for _, b, _, runs in collectives_per_step(compiled.as_text(), 0).values())
    return xla_peak(compiled), traffic


def test_two_axis_weight_gets_a_checked_spec_with_xlas_figures(cli, checking):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    [f] = [f for f in t["findings"] if f["rule"] == "SL103"]
    assert f["parameter_sharding"] == [["data"], ["model"]]
    assert [c["sharding"] for c in f["candidates"]] == [[[], ["model", "data"]], [[], ["model"]]]
    assert f["suggested_sharding"] == [[], ["model", "data"]]
    check = f["fix_check"]
    assert check["verdict"] == "better" and check["change"] == "w -> P(None, ('model', 'data'))"
    assert f["fix"].startswith("shard w as P(None, ('model', 'data')) instead of P('data', 'model')"), f["fix"]
    assert "(checked: " in f["fix"]

    module = script_module(SCRIPT, "_sl103_two_axis_head")
    written = _figures(module, P("data", "model"))
    fixed = _figures(module, P(None, ("model", "data")))
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == fixed
    # XLA's compile: lower on both figures, the all-reduce of the partial sums gone.
    assert fixed[0] < written[0] and fixed[1] < written[1]
