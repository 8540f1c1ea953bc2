"""A parameter written as a module attribute (Equinox's ``model.embed.weight``) and its optax moments
(``opt_state[0].mu.embed.weight``) are one SL203 finding, as a dict's ``params['emb']`` and
``opt_state['mu']['emb']`` are (haliax, newbie19 F6: three findings, the third's fix not compiled for lint's cap).
The oracle for its figures is XLA: the step compiled here as written, its memory_analysis() peak."""

import json
import os

import pytest
from hlo_oracle import xla_peak
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "module_embedding_with_moments.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_a_module_parameter_and_its_optax_moments_are_one_sl203_finding(cli, checking):
    module = script_module(SCRIPT)
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    findings = json.loads(result.out)["targets"][0]["findings"]
    [f] = [f for f in findings if f["rule"] == "SL203"]
    assert f["parameter"] == "model.embed.weight", f
    assert sorted(f["parameters"]) == ["model.embed.weight", "opt_state[0].mu.embed.weight",
                                       "opt_state[0].nu.embed.weight"], f
    # Its fix check moved the three together and measured against the step as written, compiled by XLA here.
    check = f["fix_check"]
    assert check is not None and check["verdict"] != "failed", f
    for path in f["parameters"]:
        assert path in check["change"], check["change"]
    lowered = module.shard_lint_targets()["replicated"]
    assert check["peak_bytes_before"] == xla_peak(lowered.compile())
    assert "lint checks at most" not in json.dumps(findings)
