"""tensor_parallel_pairs on the pairs XLA compiled for 8 compile-only H100 devices (fixtures/hlo/meaning-h100,
generate_meaning_texts.py --platform h100; no compile here). XLA's GPU compiler gives the matmuls other forms than
CPU's: Triton gemm fusions (an activation fused into the down projection's prologue or the up projection's
epilogue), split-K (a small matmul's contracted dimension cut into a batch, its slices added by a reduce fusion
before the sum), weights placed side by side for one matmul (gate and up, q, k and v) and sliced apart after,
and, with Triton's gemms off (NAME.cublas), cuBLAS calls whose result a get-tuple-element takes.

The oracle is the text, read with the regular expressions of tests/stored_hlo.py: the entry holds no plain dot
(each matmul is a gemm fusion or a cuBLAS call); the all-reduce's operand leads, through bitcasts, a cuBLAS call's
result or a fusion that only adds slices, to the matmul that reads down; the other matmuls read the up weights
(behind a fusion that concatenates them); the sum has x's per-device elements, or not for the widening and
narrowing pairs."""

import re
from math import prod

import pytest
from stored_hlo import (
    DATA_MODEL,
    MEANING_H100,
    MEANING_SPECS,
    computations,
    dims,
    entry_inputs,
    entry_instructions,
    meaning_text,
    releases,
)

from jax_shard_lint.passes.hlo.collective_intent import classify, parameters
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.tensor_parallel_pairs import mark_row_parallel_sums, row_parallel_sums

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases(MEANING_H100)
FORMS = ["", ".cublas"]  # Triton's gemm fusions (XLA's default), cuBLAS calls (Triton's gemms off)
_CUBLAS = re.compile(r'custom_call_target="__cublas\$(gemm|lt\$matmul)"')


def _found(release, stored):
    text = meaning_text(release, stored, MEANING_H100)
    module = parse_hlo_module(text)
    params = parameters(entry_inputs(text, DATA_MODEL, MEANING_SPECS[stored.split(".")[0]]), ())
    collectives = classify(find_collectives(module, DATA_MODEL).collectives, module, params, DATA_MODEL)
    return text, module, params, collectives


def _body(text, rest):
    called = re.search(r"calls=%([\w.\-]+)", rest)
    return computations(text)[called.group(1)] if called else []


def _is_matmul(text, opcode, rest):
    return (opcode == "fusion" and "kind=kCustom" in rest and any(" dot(" in line for line in _body(text, rest))) \
        or (opcode == "custom-call" and bool(_CUBLAS.search(rest)))


def _adds_slices(text, opcode, rest):
    """A loop fusion of one reduce and nothing else (split-K's sum of the slices' products)."""
    ops = [re.match(r"^\s*(?:ROOT )?%\S+ = \S+ ([\w\-]+)\(", line).group(1) for line in _body(text, rest)]
    return opcode == "fusion" and "kind=kLoop" in rest and ops.count("reduce") == 1 \
        and set(ops) <= {"parameter", "constant", "reduce", "bitcast"}


def _matmul_behind(text, entry, name):
    """The matmul whose result ``name`` is, through bitcasts, a cuBLAS call's result and split-K's sum."""
    for _ in range(8):
        _, opcode, ops, rest = entry[name]
        if _is_matmul(text, opcode, rest):
            return name
        if opcode not in ("bitcast", "get-tuple-element") and not _adds_slices(text, opcode, rest):
            return None
        name = ops[0]
    return None


def _weights(text, entry, matmul):
    """The entry parameters (their op_names) the matmul reads, behind bitcasts and a fusion that concatenates."""
    names, todo = set(), list(entry[matmul][2])
    while todo:
        shape, opcode, ops, rest = entry[todo.pop()]
        if opcode == "parameter":
            names.add(re.search(r'op_name="([^"]*)"', rest).group(1))
        elif opcode == "bitcast" or (opcode == "fusion" and any(" concatenate(" in line
                                                                for line in _body(text, rest))):
            todo.extend(ops)
    return names


def _pair(text):
    """The all-reduce (its name, start or synchronous), the weights of the matmul it sums, the weights of every
    other matmul, whether the entry holds a plain dot, its elements and x's per-device elements."""
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op in ("all-reduce", "all-reduce-start")]
    down = _matmul_behind(text, entry, entry[summed][2][0])
    others = set().union(*(_weights(text, entry, n) for n, (_, op, _, rest) in entry.items()
                           if n != down and _is_matmul(text, op, rest)))
    [x] = [n for n, (_, op, _, rest) in entry.items() if op == "parameter" and 'op_name="x"' in rest]
    plain = any(op == "dot" for _, op, _, _ in entry.values())
    return summed, _weights(text, entry, down), others - {"x"}, plain, prod(dims(entry[summed][0])), \
        prod(dims(entry[x][0]))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name, ups, joined", [
    ("activation_pair", ["up"], None),
    ("gathered_between_pair", ["up"], None),
    ("gated_pair", ["gate", "up"], "produced sharded and an elementwise product combined (a gated MLP's, SwiGLU's)"),
    ("attention_pair", ["k", "q", "v"], "produced sharded over the heads and attention combined head by head "
                                        "(softmax(q k^T) v)"),
])
def test_a_pair_in_gpu_matmul_forms_is_the_pairs_designed_reduction(release, form, name, ups, joined):
    """XLA's H100 text: no plain dot; the all-reduce sums a matmul (a gemm fusion or a cuBLAS call, behind
    split-K's sum where XLA split it) by down; the other matmuls read x and the up weights (side by side where XLA
    fused them); the sum has x's per-device elements. The tool: that all-reduce, its why naming down and the ups
    with their specs, as on CPU."""
    text, module, params, collectives = _found(release, name + form)
    summed, down, others, plain, elements, x_elements = _pair(text)
    assert (down, sorted(others), plain, elements) == ({"down"} if name != "attention_pair" else {"o"}, ups, False,
                                                       x_elements)
    assert bool(_CUBLAS.search(text)) == (form == ".cublas")
    found = row_parallel_sums(module, collectives, params)
    assert list(found) == [summed]
    why = found[summed]
    row = "o" if name == "attention_pair" else "down"
    assert why.startswith(f"the row-parallel half of a tensor-parallel pair (Megatron's): {row} P('model') is "
                          "sharded on the dimension this matmul contracts, which "), why
    spec = "P(None, ('model', 'data'))" if name == "gathered_between_pair" else "P(None, 'model')"
    if joined is None:
        assert f"which the matmul before it by up {spec} produced sharded" in why
    else:
        assert "which the matmuls before it by " + " and ".join(f"{u} {spec}" for u in ups) + f" {joined}" in why
    assert why.endswith(f"the sum returns the activation to the pair's input width "
                        f"(f32{list(dims(entry_instructions(text)[summed][0]))}): the designed reduction, which no "
                        f"layout of {row} avoids short of giving up the pair")
    marked = mark_row_parallel_sums(module, collectives, params)
    assert [m.why for m in marked if m.hlo_name == summed] == [why]


@pytest.mark.parametrize("release", RELEASES)
def test_the_gpu_forms_the_stored_pairs_hold(release):
    """What makes these texts GPU's, read from XLA's text: gathered_between_pair's down matmul holds the tanh
    (fused into its prologue) and split-K's sum follows it; gated_pair's gate and up are one matmul's operand,
    concatenated."""
    text = meaning_text(release, "gathered_between_pair", MEANING_H100)
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op in ("all-reduce", "all-reduce-start")]
    _, opcode, [reduced], rest = entry[entry[summed][2][0]]
    assert _adds_slices(text, opcode, rest)
    assert any(" tanh(" in line for line in _body(text, entry[reduced][3]))
    gated = meaning_text(release, "gated_pair", MEANING_H100)
    entry = entry_instructions(gated)
    assert any(_is_matmul(gated, op, rest) and _weights(gated, entry, n) == {"x", "gate", "up"}
               for n, (_, op, _, rest) in entry.items())


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name, ratio", [("widening_pair", 4), ("narrowing_pair", 1 / 2)])
def test_a_gpu_pair_that_does_not_return_to_its_input_width_is_no_row_parallel_sum(release, form, name, ratio):
    """The same column/row pair in GPU's forms (narrowing_pair's matmuls both split-K on Triton), but the sum
    has another width than x's shard: no pair."""
    text, module, params, collectives = _found(release, name + form)
    summed, down, others, plain, elements, x_elements = _pair(text)
    assert (down, others, plain, elements) == ({"down"}, {"up"}, False, x_elements * ratio)
    assert row_parallel_sums(module, collectives, params) == {}
    assert mark_row_parallel_sums(module, collectives, params) == collectives
