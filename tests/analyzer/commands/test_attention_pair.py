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
ROPE_GQA = os.path.join(FIXTURES, "scripts", "rope_gqa_attention.py")


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

    why = _row_parallel_sum_named(cli, ATTENTION, summed, nbytes)
    assert "attention combined head by head" in why


def test_q_on_its_contracted_dim_is_no_pair(cli):
    (t,) = lint_targets(cli, ATTENTION, "--set", "q_contracted=True")
    assert not [c for c in t["collectives"] if (c["why"] or "").startswith("the row-parallel half")]


def _bodies(text: str) -> dict[str, str]:
    """computation name -> its text, from XLA's."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^%([\w.\-]+) .*?\{\n(.*?)^\}", text, re.M | re.S)}


def test_attention_through_rope_a_causal_mask_and_grouped_query_heads_closes_a_pair(cli):
    """A real Llama's attention (issue #46's Flax Llama): between q/k and the scores RoPE slices, negates and
    concatenates the head dimension's halves; the causal mask is a select on iotas, in a fusion of no operands;
    grouped-query attention broadcasts each of the 2 k/v heads to its 4 q heads. XLA's text: the one forward
    all-reduce over model adds o's partial sums of the residual stream (64/4 x 256 x 256 f32 per device, 16x o's
    256 KiB: SL103's expansion ratio, at its 4 MiB floor), and the values it is computed from hold those ops. The
    tool: intended (activation), its why naming o and the three column halves, and no SL103."""
    text = script_module(ROPE_GQA).shard_lint_targets()["train_step"].compile().as_text()
    lines, bodies = _lines(text), _bodies(text)
    forward = {n: c for n, c in collectives_per_step(text, 8).items() if c[0] == "all-reduce"
               and "transpose(" not in lines[n] and c[2] == 2}
    [(summed, (_, nbytes, _, runs))] = forward.items()
    assert nbytes == 64 // 4 * 256 * 256 * 4 and runs == 1  # x's per-device elements (batch on data), f32

    def behind(name, seen):  # the values the sum is computed from, up to the arguments
        if name in seen or "parameter(" in lines[name]:
            return []
        seen.add(name)
        return [name] + [v for o in _operands(lines[name]) for v in behind(o, seen)]

    values = behind(summed, set())
    held = " ".join(lines[v] + bodies.get((re.search(r"calls=%([\w.\-]+)", lines[v]) or [None, ""])[1], "")
                    for v in values)
    def body(v):
        called = re.search(r"calls=%([\w.\-]+)", lines[v])
        return bodies.get(called.group(1), "") if called else ""

    masks = [v for v in values if re.search(r" fusion\(\)", lines[v])]  # the causal mask: from iotas, no operand
    assert masks and all(" iota(" in body(m) and " select(" in body(m) for m in masks)
    held = " ".join(lines[v] + body(v) for v in values)
    assert " concatenate(" in held and " negate(" in held and " slice(" in held  # RoPE's rotate_half
    # GQA: each device's one k (and v) head, f32[16,256,1,32], broadcast to its 4 q heads
    repeats = [v for v in values if " broadcast(" in body(v) and re.search(r"= f32\[16,4,", lines[v])
               and any(re.search(r"= f32\[16,256,1,32\]", lines[o]) for o in _operands(lines[v]))]
    assert repeats

    _row_parallel_sum_named(cli, ROPE_GQA, summed, nbytes)


def test_o_on_its_output_features_is_no_pair(cli):
    (t,) = lint_targets(cli, ROPE_GQA, "--set", "o_output=True")
    assert not [c for c in t["collectives"] if (c["why"] or "").startswith("the row-parallel half")]


def _row_parallel_sum_named(cli, script, summed, nbytes):
    """lint's account of the o projection's sum XLA compiled (``summed``, ``nbytes``): intended, the
    row-parallel half of the pair with o and q/k/v named with their specs, no SL103. Its why."""
    (t,) = lint_targets(cli, script)
    [c] = [c for c in t["collectives"] if c["hlo_name"] == summed]
    assert (c["bytes"], c["intent"]) == (nbytes, "activation")
    assert c["why"].startswith("the row-parallel half of a tensor-parallel pair"), c["why"]
    for path in ("w['o'] P('model')", "w['q'] P(None, 'model')", "w['k'] P(None, 'model')",
                 "w['v'] P(None, 'model')"):
        assert path in c["why"], c["why"]
    assert not [f for f in t["findings"] if f["rule"] == "SL103"]
    return c["why"]
