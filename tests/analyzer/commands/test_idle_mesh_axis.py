"""SL207: a mesh axis that splits no argument (newbie17's blackjax chains, replicated on a chains=4 x data=2 mesh:
four copies of every chain's work and no collective to show it). The finding names the batch arguments, and its
fix (the batch on every axis) is printed with XLA's figures: the fixture as written and as fixed, compiled here."""

import json
import os

import jax
import pytest
from hlo_oracle import xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "sl207_idle_mesh_axis.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_an_idle_axis_is_named_and_the_batch_on_every_axis_is_measured_by_xla(cli, checking):
    module = script_module(SCRIPT)
    written = jax.jit(module.step).lower(*module.arguments(P())).compile()
    fixed = jax.jit(module.step).lower(*module.arguments(P(), data_spec=P(("data", "model")))).compile()
    assert xla_peak(fixed) < xla_peak(written)  # XLA: the rows split over 'model' too

    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never", "-q")
    targets = {t["name"]: t for t in json.loads(result.out)["targets"]}
    assert not [f for f in targets["chains_on_model"]["findings"] if f["rule"] == "SL207"]
    [f] = [f for f in targets["chains_replicated"]["findings"] if f["rule"] == "SL207"]
    assert f["parameters"] == ["X", "y"] and "no argument is split over mesh axis 'model'" in f["message"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(written), xla_peak(fixed))
    assert "X and y as P(('data', 'model')) instead of P('data') (checked: peak -" in f["fix"], f["fix"]
