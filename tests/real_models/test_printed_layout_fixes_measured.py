"""SL203-SL206 on a real model library: transformers' Flax GPT-2 at its real vocabulary (50257, which no mesh
axis divides) with optax AdamW (fixtures/scripts/gpt2_uneven_vocab.py), in the four ways a user meets each rule
there. Each rule fires; its fix is printed only where XLA measures it better (tests/fix_oracle.py makes the
layout the fix describes the way a user writes it and compiles it), and where it is not printed the finding
says what was tried, with XLA's figures of the tried layout where the oracle can make it (issue 46).

What XLA measures here (jax 0.10.2 and 0.12, 8 virtual CPU devices): the replicated embedding's (SL203) fix is
the state advice, the layout the step returns it in (P(None, 'model')), better on both figures; the logits
constraint's (SL204) alternatives trade a lower peak for more traffic or change nothing, so none is printed;
pinning the donated embedding's output back to P() (SL205) trades a lower peak for more traffic, and dropping
its donation changes nothing: neither is printed; the sequence-parallel padding (SL206) is cheapest as written
(each move of the tokens raises one figure). SL205's pin is not made by the oracle: written with jit's
out_shardings (every other output on the sharding XLA chose) it compiles to the same traffic and a peak 14.8 KB
(0.01%) below that of the candidate lint compiles, which edits that one result's sharding in the StableHLO."""

from __future__ import annotations

import os

import pytest
from conftest import FIXTURES
from fix_oracle import assert_fixes_measured, lint_findings
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "gpt2_uneven_vocab.py")
LIBRARIES = ("transformers", "flax", "optax")

# case -> (lint options, the rule the case is about, the rules whose fix is printed). SL103 (the logits'
# partial sums) is ignored where it fires beside the rule: its advice on a replicated table names no layout.
CASES = {
    "replicated_wte": (("--threshold", "replicated-argument-bytes=1MiB", "--ignore", "SL103"), "SL203",
                       {"SL201", "SL203"}),
    "constrained_logits": ((), "SL204", {"SL202"}),
    "donated": (("--ignore", "SL201", "--ignore", "SL103"), "SL205", set()),
    "sequence_parallel": ((), "SL206", set()),
}


ALSO_PRINTED = {"constrained_logits": {"SL105"}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sl203_to_sl206_fixes_on_gpt2_are_measured_by_xla(cli, monkeypatch, case):
    lint_options, rule, expected = CASES[case]
    target = lint_findings(cli, monkeypatch, SCRIPT, ("--set", f"case={case}", *lint_options), LIBRARIES)
    module = script_module(SCRIPT)
    fn, options, args = module.step_and_inputs(case)
    printed = assert_fixes_measured(target, fn, options, args, 2,
                                    constrained=lambda spec: module.step_and_inputs(case, logits=spec))
    # On jax 0.12 the constrained logits' SL105 prints suggest's replicated baseline too (the solver fixes compile
    # suggest's baselines, advice/baselines.py), measured better by the oracle above; on 0.10.2 it prints none.
    assert expected <= printed <= expected | ALSO_PRINTED.get(case, set()), printed
    about = [f for f in target["findings"] if f["rule"] == rule]
    assert about, [f["rule"] for f in target["findings"]]
    for f in about:
        if rule not in expected:
            assert "was tried" in f["fix"], f["fix"]
    if rule == "SL204":  # the constraint the oracle restates is the user's, at the script's line
        [f] = about
        assert f["source"]["file"].endswith("gpt2_uneven_vocab.py"), f["source"]
        assert "with_sharding_constraint" in open(SCRIPT).read().splitlines()[f["source"]["line"] - 1]
