"""Attention's output projection closes a tensor-parallel pair (LLaMA's self-attention, Megatron-style):
q, k and v column-parallel over the heads, softmax(q k^T) v head by head, o row-parallel. The oracle is
XLA: the forward all-reduce over ``model``, its bytes (as many elements as the residual stream x) and the
weightless attention matmul between the halves are read from ``compiled.as_text()`` with the test's own
regular expressions. With q sharded on the dimension it contracts (newcomer10's mistake) it is no pair."""

import os
import re

from conftest import FIXTURES, lint_targets
from hlo_oracle import collectives_per_step
from scripts import script_module

ATTENTION = os.path.join(FIXTURES, "scripts", "attention_tensor_parallel.py")


def _lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}


def _operands(line: str) -> list[str]:
    return re.findall(r"%([\w.\-]+)", line.split(" = ", 1)[1].split("(", 1)[1].split("), ")[0])


def test_attention_output_projection_closes_a_pair_intended_with_its_reason(cli):
    text = script_module(ATTENTION).shard_lint_targets()["train_step"].compile().as_text()
    lines = _lines(text)
    forward = {n: c for n, c in collectives_per_step(text, 8).items() if c[0] == "all-reduce"
               and "transpose(" not in lines[n] and "dot_general" in lines[n] and c[2] == 2}
    [(summed, (_, nbytes, _, runs))] = forward.items()
    assert nbytes == 8 // 4 * 256 * 256 * 4 and runs == 1  # x's per-device elements (batch on data), f32

    def dots_behind(name, seen):  # every dot the summed value is computed from, weightless ones included
        if name in seen or "parameter(" in lines[name]:
            return []
        seen.add(name)
        found = [name] if ("dot_general" in lines[name] and "fusion(" in lines[name]) or " dot(" in lines[name] else []
        return found + [d for o in _operands(lines[name]) for d in dots_behind(o, seen)]

    dots = dots_behind(summed, set())
    weightless = [d for d in dots if not any("parameter(" in lines[o] for o in _operands(lines[d]))]
    assert len(dots) >= 5 and weightless  # o, q, k, v by a weight; attention's q k^T and probs v by none

    (t,) = lint_targets(cli, ATTENTION)
    [c] = [c for c in t["collectives"] if c["hlo_name"] == summed]
    assert (c["bytes"], c["intent"]) == (nbytes, "activation")
    assert c["why"].startswith("the row-parallel half of a tensor-parallel pair"), c["why"]
    for path in ("w['o'] P('model')", "w['q'] P(None, 'model')", "w['k'] P(None, 'model')",
                 "w['v'] P(None, 'model')"):
        assert path in c["why"], c["why"]
    assert "attention combined head by head" in c["why"]
    assert not [f for f in t["findings"] if f["rule"] == "SL103"]


def test_q_on_its_contracted_dim_is_no_pair(cli):
    (t,) = lint_targets(cli, ATTENTION, "--set", "q_contracted=True")
    assert not [c for c in t["collectives"] if (c["why"] or "").startswith("the row-parallel half")]
