"""A LayerNorm between two matmuls makes them no tensor-parallel pair (issue 46; fixtures/scripts/
norm_between_pair_halves.py, a pre-norm block laid out as a newcomer laid out transformers' Flax ViT): the attention
output projection produces d_model split on model, the up projection contracts it. XLA computes the norm between
them on the split hidden vector by all-reducing its statistics over model, then sums the up projection's whole
f32[batch/data, seq, d_ff] output, 4x its input gathered, under SL103's 8x ratio. The oracle is XLA's compiled
text: each up projection's forward all-reduce over model, with the norm's statistics all-reduced over model in
the same block before it, is one of the SL103 finding's ops, and no reason calls it a pair's; and the fix it
prints (the MLP made a pair: up column-parallel, down row-parallel), written into the step by hand and compiled,
gives the figures it prints, better than the step as written."""

import os
import re

from conftest import FIXTURES
from fix_oracle import better, fixed, lint_findings, measured
from hlo_oracle import collectives_per_step
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "norm_between_pair_halves.py")


def test_a_norm_between_the_halves_is_no_pair_and_the_mlp_pair_fix_is_measured(cli, monkeypatch):
    script = script_module(SCRIPT)
    fn, options, args = script.step_and_inputs()
    written, as_written = measured(fn, options, args, 2)
    text = written.as_text()
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}
    forward = {n: c for n, c in collectives_per_step(text, 8).items()
               if c[0] == "all-reduce" and c[2] == 2 and "transpose(" not in lines[n]}
    ups = {n for n in forward if re.search(r"/up/dot_general", lines[n])}
    norms = {re.search(r"\(block(\d+)\)/norm/reduce_sum", lines[n]).group(1) for n in forward
             if re.search(r"\(block\d+\)/norm/reduce_sum", lines[n])}
    assert len(ups) == len(norms) == script.LAYERS, (sorted(ups), sorted(norms))

    target = lint_findings(cli, monkeypatch, SCRIPT, (), ())
    [f] = [f for f in target["findings"] if f["rule"] == "SL103"]
    assert f["parameter"].endswith("['up']"), f["parameter"]
    assert ups <= set(f["ops"]), (sorted(ups), f["ops"])
    assert "a norm of an activation split on that dimension" in f["message"], f["message"]
    assert not any(c.get("why") for c in target["collectives"] if c["hlo_name"] in ups)
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    moves = check["change"].split(" together with ")
    assert moves[0].startswith("params[*]['up']") and moves[0].endswith(" -> P(None, 'model')"), moves
    assert moves[1].startswith("params[*]['down']") and moves[1].endswith(" -> P('model')"), moves
    after = fixed(check["change"], fn, options, args, 2, written)
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after
    assert better(as_written, after), (as_written, after)
