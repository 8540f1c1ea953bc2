"""Where another finding's move is printed for some state values in place of the state fix (SL103's P('model')
for a replicated tied embedding and its momentum), the state fix's figures go on a finding that prints the state
fix (the small outputs', SL201), not on one that prints the move: a new user's BERT had its 66 small outputs
point at "the finding for params[...]['embedding']", which printed SL103's move (issue #46). The figures are
XLA's: the step as written and with each state input given the layout the step returns it in, compiled here
(fixtures/scripts/tied_embedding_small_state.py)."""

import json
import os
import re

import pytest
from fix_oracle import STATE_LAYOUTS, fixed, measured
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "tied_embedding_small_state.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_the_state_fix_keeps_its_figures_on_a_finding_that_prints_it(cli, checking):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    findings = json.loads(result.out)["targets"][0]["findings"]
    [small] = [f for f in findings if f["rule"] == "SL201" and " small outputs come back" in f["message"]]
    moved = [f for f in findings if f["rule"] in ("SL201", "SL203") and f is not small]
    # Each layer's scale and bias and their momentum come back moved; with the embedding and its momentum, all
    # the state values the state fix changes.
    assert small["count"] == 2 * 2 * script_module(SCRIPT).LAYERS
    assert moved and all(f["fix"].startswith("SL103's fix for params['embed'], measured better than the state fix "
                                             f"for it (which changes all {small['count'] + 2} state values")
                         for f in moved), moved
    # The small outputs' finding holds the figures, and they are XLA's.
    assert "not this finding's alone" in small["fix"] and "their figures are on" not in small["fix"], small["fix"]
    module = script_module(SCRIPT)
    args = module.arguments()
    written, as_written = measured(module.train_step, {}, args, 2)
    taken = fixed(STATE_LAYOUTS, module.train_step, {}, args, 2, written)
    check = small["fix_check"]
    assert check["change"] == STATE_LAYOUTS and check["verdict"] == "better"
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == taken
    # The moved findings restate the figure they were measured against (the state fix, every moved value at once).
    figure = re.search(r"not this finding's alone: (peak [^,]+),", small["fix"]).group(1)
    assert all(f"measured {figure}," in f["fix"] for f in moved), figure
    # No finding points at figures another does not hold.
    holders = {f["subject"] for f in findings if "not this finding's alone" in (f["fix"] or "")}
    pointed = {m.group(1) for f in findings for m in [re.search(r"their figures are on the finding for (.*)\)$",
                                                                f["fix"] or "")] if m}
    assert pointed <= holders, (pointed, holders)
