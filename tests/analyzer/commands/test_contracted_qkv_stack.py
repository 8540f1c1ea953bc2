"""SL103 on a stack of attention layers whose q, k and v kernels are all sharded on the dimension they contract
(issue 46, a newcomer's Flax T5: the printed fix moved 4 of the mistaken kernels, because each sum was judged
alone and only some reached partial-sum-min-bytes). XLA's compiled text is the oracle: each all-reduce of the
q, k and v projections' partial sums (a layer's three combined into one) is under the 4 MiB default, and
together they are over it. The finding names every layer's q, k and v kernels, never the output projection
(its sum is the row-parallel half of the pairs the fix makes), and its printed fix, one layout for all of
them, carries the figures XLA measures for that layout made with jax.jit: better than as written."""

import os
import re

from conftest import FIXTURES
from fix_oracle import better, fixed, lint_findings, measured
from hlo_oracle import collectives_per_step
from scripts import script_module

STACK = os.path.join(FIXTURES, "scripts", "contracted_qkv_stack.py")
LAYERS = 3
MIN_BYTES = 4 * 2**20  # partial-sum-min-bytes' default


def _lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}


def test_every_layers_qkv_kernels_are_one_mistake_and_one_checked_fix(cli, monkeypatch):
    fn, options, args = script_module(STACK).step_and_inputs(layers=LAYERS)
    written, as_written = measured(fn, options, args, 1)
    text = written.as_text()
    lines = _lines(text)
    per_step = collectives_per_step(text, 8)
    # XLA's forward all-reduces of three values each (a layer's q, k and v outputs, f32[batch/data, seq, d_model])
    # over model: each under the threshold, together over it.
    combined = {n: c for n, c in per_step.items() if c[0] == "all-reduce" and c[2] == 2
                and re.search(r"= \(f32\[4,256,256\]\S*, f32\[4,256,256\]\S*, f32\[4,256,256\]\S*\) all-reduce\(",
                              lines[n])}
    assert len(combined) >= 2, sorted(combined)
    assert all(c[1] < MIN_BYTES for c in per_step.values() if c[0] == "all-reduce")
    assert sum(c[1] * c[3] for c in combined.values()) >= MIN_BYTES

    target = lint_findings(cli, monkeypatch, STACK, (), ())
    [f] = [f for f in target["findings"] if f["rule"] == "SL103"]
    assert sorted(f["parameters"]) == ["w[*]['k']", "w[*]['q']", "w[*]['v']"], f["parameters"]
    assert set(f["ops"]) == set(combined), (f["ops"], sorted(combined))
    assert f["bytes"] == sum(c[1] * c[3] for c in combined.values())
    check = f["fix_check"]
    assert check["verdict"] == "better" and check["change"] == "w[*]['q'], w[*]['k'], w[*]['v'] -> P(None, 'model')"
    assert "(checked: " in f["fix"] and "['o']" not in f["fix"]
    # The oracle moves the kernels the change names, every layer's (it asserts each pattern matched an argument).
    after = fixed(check["change"], fn, options, args, 1, written)
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after
    assert better(as_written, after), (as_written, after)
