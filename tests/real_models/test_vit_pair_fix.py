"""A new user's transformers Flax ViT (issue 46, fixtures/scripts/flax_vit_layouts.py, its ``bad`` layout, two
layers): the MLP's intermediate kernel sharded on the dimension it contracts, its output dense on the dimension it
produces, and the attention output dense on the dimension it produces too. Read as a column/row pair, the attention
output dense and the intermediate kernel are none: a LayerNorm lies between them, which XLA computes on the split
hidden vector by all-reducing its statistics over model (it reads the activation whole), and the intermediate's sum
(f32[16, 65, 1024], 4x its operand gathered) is that weight's layout's. SL103 reports it, and compiles every pairing
of the finding's weights (every pair together, the attention pair, the MLP pair) and prints the measured best: the
pair an expert writes, the intermediate column-parallel and the output dense row-parallel, each with its AdamW
moments. XLA is the oracle: the layout the printed change describes, made with jax.jit and compiled, gives the
figures the fix prints, better than the step as written; the intermediate's forward sums, with the norm's statistics
summed before them, and the output dense's backward all-reduces of its whole input gradient are the SL103 finding's
ops, and no reason calls the intermediate's sums a pair's."""

import os
import re

from conftest import FIXTURES
from fix_oracle import better, fixed, lint_findings, measured
from hlo_oracle import collectives_per_step
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "flax_vit_layouts.py")


def test_vit_prints_the_mlp_pair_fix_measured_by_xla(cli, monkeypatch):
    # layout=bad: the script lowers the bad step alone (by default both, and lint would trace the good one too).
    # The donation (SL202) and its three compiles are not this test's: the other findings are the same without it.
    target = lint_findings(cli, monkeypatch, SCRIPT, ("--set", "layout=bad", "--target", "bad_step", "--ignore",
                                                      "SL202"), ("transformers", "flax", "optax"))
    script = script_module(SCRIPT)
    fn, options, args = script.step_and_inputs("bad")
    [f] = [f for f in target["findings"] if f["rule"] == "SL103"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    moves = check["change"].split(" together with ")
    assert len(moves) == 2, check["change"]
    assert "['intermediate']['dense']['kernel']" in moves[0] and moves[0].endswith(" -> P(None, 'model')"), moves
    assert re.match(r"params\['vit'\]\['encoder'\]\['layer'\]\[\*\]\['output'\]\['dense'\]\['kernel'\]", moves[1])
    assert moves[1].endswith(" -> P('model')"), moves
    # Every pair together (the attention output dense moved too) was compiled beside it and measured worse.
    attention_output = r"\['attention'\]\['output'\]\['dense'\]\['kernel'\]"
    assert re.search(attention_output + r" .* -> P\('model'\) was tried too, compiled and measured", f["fix"]), f["fix"]
    written, as_written = measured(fn, options, args, 2)
    after = fixed(check["change"], fn, options, args, 2, written)
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after
    assert better(as_written, after), (as_written, after)
    # The output dense's backward all-reduces (its input gradient, f32[batch/data, 65, 1024], over model).
    text = written.as_text()
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}
    sums = {n: c for n, c in collectives_per_step(text, 8).items() if c[0] == "all-reduce" and c[2] == 2}
    backward = {n for n in sums
                if "transpose(" in lines[n] and re.search(r"/layer/\d+/output/dense/dot_general", lines[n])}
    assert len(backward) == script.LAYERS, sorted(backward)
    assert backward <= set(f["ops"]), (sorted(backward), f["ops"])
    assert "backward pass all-reduces that matmul's whole input gradient" in f["message"]
    # The intermediate's forward sums, and the LayerNorm before each reducing its statistics over model first.
    forward = {n for n in sums if "transpose(" not in lines[n]
               and re.search(r"/layer/\d+/intermediate/dense/dot_general", lines[n])}
    norms = {n for n in sums if "transpose(" not in lines[n] and re.search(r"/layer/\d+/layernorm_after/", lines[n])}
    assert len(forward) == len(norms) == script.LAYERS, (sorted(forward), sorted(norms))
    assert forward <= set(f["ops"]), (sorted(forward), f["ops"])
    assert "a norm of an activation split on that dimension" in f["message"]
    assert not any(c.get("why") for c in target["collectives"] if c["hlo_name"] in forward)
