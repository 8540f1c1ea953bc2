"""Findings' why: lines come from our own propagation, run only for them; where it stops (an op or call graph
it cannot follow: a diffrax step's nested jitted helpers raised KeyError there, newbie16 F1), lint keeps its
findings and figures, and says the why: lines are missing and why, instead of dropping them unseen."""

import json

from conftest import FIXTURES

SCRIPT = f"{FIXTURES}/scripts/sl101_replicating_collective.py"


def test_a_propagation_that_stops_is_said_and_the_findings_stand(cli, monkeypatch):
    args = ("lint", SCRIPT, "--format", "json", "-q", "--fail-on", "never", "--no-fix-check", "--no-cache")
    written = json.loads(cli(*args).out)
    assert any(f.get("provenance") for t in written["targets"] for f in t["findings"])  # the why: lines
    assert not any("why: lines stopped" in w for t in written["targets"] for w in t["warnings"])

    from jax_shard_lint.passes.pipelines import lint

    def stopped(*_args, **_kwargs):
        raise KeyError("inner_0")

    monkeypatch.setattr(lint, "run_propagation", stopped)
    result = cli(*args)
    assert result.code == 0, result.err
    report = json.loads(result.out)
    for before, after in zip(written["targets"], report["targets"], strict=True):
        assert [(f["rule"], f["message"], f["fix"]) for f in after["findings"]] == [
            (f["rule"], f["message"], f["fix"]) for f in before["findings"]]
        assert after["memory"] == before["memory"] and after["collectives"] == before["collectives"]
        if before["findings"]:
            assert any("the propagation that gives the findings their why: lines stopped (KeyError: 'inner_0')"
                       in w for w in after["warnings"]), after["warnings"]
