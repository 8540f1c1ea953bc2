"""tensor_parallel_pairs on XLA's stored compiled texts (no compile): which forward all-reduce closes a column/row
pair of matmuls (Megatron's row-parallel sum, intended) and the reason it gives. The oracle is the text, read
with the regular expressions of tests/stored_hlo.py: the all-reduce's operand is a dot (or a fusion holding one)
by an entry parameter; walking back from the dot's other operand through elementwise fusions (no dot, no
slice at the device's offset) and all-gathers reaches dots by x and one weight each; the all-reduce's result
has as many elements as x's per-device shard (the pair returns to its input's width) or not."""

import re
from math import prod

import pytest
from stored_hlo import (
    DATA_MODEL,
    computations,
    dims,
    entry_instructions,
    meaning_inputs,
    meaning_program,
    releases,
)

from jax_shard_lint.passes.hlo.collective_intent import classify, parameters
from jax_shard_lint.passes.hlo.tensor_parallel_pairs import (
    column_parallel_gradient_sums,
    mark_row_parallel_sums,
    row_parallel_sums,
)

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()


def _found(release, name):
    text, module, found = meaning_program(release, name)
    params = parameters(meaning_inputs(release, name), ())
    collectives = classify(found, module, params, DATA_MODEL)
    return text, module, params, collectives


def _body(text, rest):
    called = re.search(r"calls=%([\w.\-]+)", rest)
    return computations(text)[called.group(1)] if called else []


def _is_dot(text, opcode, rest):
    return opcode == "dot" or (opcode == "fusion" and any(" dot(" in line for line in _body(text, rest)))


def _parameter_name(entry, name):
    """The op_name JAX's metadata gives the entry parameter ``name``, or None for another value."""
    shape, opcode, _, rest = entry[name]
    return re.search(r'op_name="([^"]*)"', rest).group(1) if opcode == "parameter" else None


def _halves(text, value):
    """(the weights, the inputs) of the dots ``value`` is an elementwise function of, walking back through
    loop fusions without a dot or a dynamic-slice and through all-gathers; None where it reaches anything
    else (a parameter, a slice at the device's offset)."""
    entry = entry_instructions(text)
    weights, inputs, todo, seen = set(), set(), [value], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        _, opcode, ops, rest = entry[name]
        if _is_dot(text, opcode, rest):
            params = [_parameter_name(entry, o) for o in ops]
            weights |= {p for p in params if p not in (None, "x")}
            inputs |= {o for o, p in zip(ops, params) if p == "x"}
        elif opcode == "all-gather" or (opcode == "fusion" and "kind=kLoop" in rest
                                        and not any(re.search(r" (dot|dynamic-slice|partition-id)\(", line)
                                                    for line in _body(text, rest))):
            todo.extend(ops)
        else:
            return None
    return weights, inputs


def _pair(text):
    """The forward all-reduce's (name, its dot's weight, the column halves' weights and inputs, its elements)."""
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op == "all-reduce"]
    [dot] = entry[summed][2]
    assert _is_dot(text, entry[dot][1], entry[dot][3])
    [down] = [_parameter_name(entry, o) for o in entry[dot][2] if _parameter_name(entry, o)]
    [activation] = [o for o in entry[dot][2] if not _parameter_name(entry, o)]
    return summed, down, _halves(text, activation), prod(dims(entry[summed][0]))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name, ups, spec", [
    ("gated_pair", ["gate", "up"], "P(None, 'model')"),
    ("activation_pair", ["up"], "P(None, 'model')"),
    ("gathered_between_pair", ["up"], "P(None, ('model', 'data'))"),
])
def test_a_row_parallel_sum_after_column_parallel_halves_is_the_pairs_designed_reduction(release, name, ups, spec):
    """XLA's text: the all-reduce adds the partial sums of a dot by down; that dot's other operand is an
    elementwise function (silu times a product for SwiGLU, tanh, through an all-gather over data between the
    halves) of dots by x and each up weight; the sum has x's per-device elements. The tool: that all-reduce,
    its why naming down and the up weights with their specs and the pair's input width, and no other."""
    text, module, params, collectives = _found(release, name)
    summed, down, (weights, inputs), elements = _pair(text)
    entry = entry_instructions(text)
    assert (down, sorted(weights)) == ("down", ups)
    [x] = inputs
    assert prod(dims(entry[x][0])) == elements
    found = row_parallel_sums(module, collectives, params)
    assert list(found) == [summed]
    why = found[summed]
    assert why.startswith("the row-parallel half of a tensor-parallel pair (Megatron's): down P('model') is "
                          "sharded on the dimension this matmul contracts, which "), why
    [c] = [c for c in collectives if c.hlo_name == summed]
    assert why.endswith(f"the sum returns the activation to the pair's input width (f32{list(dims(entry[summed][0]))})"
                        ": the designed reduction, which no layout of down avoids short of giving up the pair")
    if len(ups) == 1:
        assert f"which the matmul before it by up {spec} produced sharded" in why
    else:
        assert (f"which the matmuls before it by gate {spec} and up {spec} produced sharded and an elementwise "
                "product combined (a gated MLP's, SwiGLU's)") in why
    gathers = [n for n, (_, op, _, _) in entry.items() if op == "all-gather" and n != summed]
    if name == "gathered_between_pair":
        [gather] = [g for g in gathers if _halves(text, g)]  # the activation's, not a weight's
        assert f"({gather} gathered it over data on the way, another axis than the pair's, which leaves its " \
               "split on model as it was)" in why
    else:
        assert " gathered it over " not in why
    marked = mark_row_parallel_sums(module, collectives, params)
    assert [m.why for m in marked if m.hlo_name == summed] == [why]
    assert [m for m in marked if m.hlo_name != summed] == [m for m in collectives if m.hlo_name != summed]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name, ratio", [("widening_pair", 4), ("narrowing_pair", 1 / 2)])
def test_a_pair_whose_output_is_wider_or_narrower_than_its_input_is_no_row_parallel_sum(release, name, ratio):
    """The same column/row structure as activation_pair (XLA's text), but the all-reduce sums another width
    than x's shard: widening_pair f32[16,512] per device for x's f32[16,128] (an expanding projection, which
    SL103 weighs), narrowing_pair f32[16,128] for x's f32[16,256]. Neither returns to the pair's input."""
    text, module, params, collectives = _found(release, name)
    summed, down, (weights, inputs), elements = _pair(text)
    [x] = inputs
    assert (down, weights) == ("down", {"up"}) and prod(dims(entry_instructions(text)[x][0])) * ratio == elements
    assert row_parallel_sums(module, collectives, params) == {}
    assert mark_row_parallel_sums(module, collectives, params) == collectives


@pytest.mark.parametrize("release", RELEASES)
def test_a_pair_whose_product_is_converted_before_its_sum_is_still_the_pair(release):
    """converted_pair (bf16): jax 0.12's CPU compile converts the down dot's bf16 product to f32 in a fusion of
    its own (one operand, a body of converts) and sums that; jax 0.10's sums the f32 dot itself. Either way the
    sum, f32 as wide as x's shard, closes the pair of up and down."""
    text, module, params, collectives = _found(release, "converted_pair")
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op == "all-reduce"]
    [operand] = entry[summed][2]
    _, opcode, ops, rest = entry[operand]
    if not _is_dot(text, opcode, rest):
        assert opcode == "fusion" and len(ops) == 1 and _is_dot(text, *[entry[ops[0]][i] for i in (1, 3)])
        assert all(re.search(r" (parameter|convert)\(", line) for line in _body(text, rest))
    [x] = [n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="x"' in r]
    assert prod(dims(entry[x][0])) == prod(dims(entry[summed][0]))
    found = row_parallel_sums(module, collectives, params)
    assert list(found) == [summed]
    assert "down P('model') is sharded" in found[summed] and "by up P(None, 'model') produced" in found[summed]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", ["row_parallel", "head_on_both_axes", "contracts_both_axes"])
def test_partial_sums_of_a_matmul_by_an_argument_close_no_pair(release, name):
    """The all-reduce sums a dot whose activation operand is an argument (x, or h sliced at the device's
    offset: a dynamic-slice of a parameter in the text), no column-parallel matmul's result."""
    text, module, params, collectives = _found(release, name)
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op == "all-reduce"]
    assert [c.intent for c in collectives if c.hlo_name == summed] == ["activation"]
    assert row_parallel_sums(module, collectives, params) == {}


@pytest.mark.parametrize("release", RELEASES)
def test_a_backward_sum_or_a_program_without_parameters_is_never_a_pair(release):
    """fsdp_train_step's all-reduce is a gradient's (op_name transpose(...)); and with no parameters known, or
    no module, nothing is read."""
    text, module, params, collectives = _found(release, "fsdp_train_step")
    assert row_parallel_sums(module, collectives, params) == {}
    text, module, params, collectives = _found(release, "gated_pair")
    assert row_parallel_sums(module, collectives, ()) == {} and row_parallel_sums(None, collectives, params) == {}
    relabelled = tuple(c.model_copy(update={"intent": "reshard"}) for c in collectives)
    assert row_parallel_sums(module, relabelled, params) == {}
    explained = tuple(c.model_copy(update={"why": "said before"}) for c in collectives)
    assert [c.why for c in mark_row_parallel_sums(module, explained, params)] == ["said before"] * len(collectives)


@pytest.mark.parametrize("release", RELEASES)
def test_the_backward_sums_of_a_stack_of_pairs_are_not_the_pairs(release):
    """pair_stack_train_step (two column/row pairs, the step returns the four weights updated: they are its
    parameters, x is data), XLA's text: two forward all-reduces over model (op_name without transpose(...)),
    the pairs' sums; and, in the backward pass (op_name transpose(jvp())), the sum of the first pair's output
    gradient, a dot by up2 whose other operand comes from dots by weights (down2's and up2's, backwards), as
    wide as x's shard: a pair's structure. Only the forward sums are pairs: a backward one is told apart by its
    op_name, not its structure."""
    text, module, _, _ = _found(release, "pair_stack_train_step")
    params = tuple(t for t in parameters(meaning_inputs(release, "pair_stack_train_step"), ()) if t.path != "x")
    collectives = classify(meaning_program(release, "pair_stack_train_step")[2], module, params, DATA_MODEL)
    entry = entry_instructions(text)
    sums = {n: rest for n, (shape, op, ops, rest) in entry.items() if op == "all-reduce" and len(ops) == 1}
    forward = sorted(n for n, rest in sums.items() if "transpose(" not in rest)
    [x] = [n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="x"' in r]
    backward = []
    for n in set(sums) - set(forward):
        dot = _through_layout(entry, entry[n][2][0])
        if _is_dot(text, entry[dot][1], entry[dot][3]) and prod(dims(entry[n][0])) == prod(dims(entry[x][0])):
            activation = [o for o in entry[dot][2] if not _parameter_name(entry, o)]
            if len(activation) == 1 and _halves(text, activation[0]):
                backward.append(n)
    assert len(forward) == 2 and backward and all("transpose(" in sums[n] for n in backward)
    found = row_parallel_sums(module, collectives, params)
    assert sorted(found) == forward
    assert ["down1 P('model') is sharded" in found[n] or "down2 P('model') is sharded" in found[n] for n in forward] \
        == [True, True]
    # The backward sums with a pair's structure are up2's input gradient: a column-parallel matmul's, said so.
    gradients = column_parallel_gradient_sums(module, collectives, params)
    assert set(backward) <= set(gradients) and not set(gradients) & set(forward)
    assert all(gradients[n].startswith("the backward pass of a column-parallel matmul") and "up2 P(None, 'model')"
               in gradients[n] for n in backward)


_COLLECTIVE = re.compile(r" (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|dynamic-slice"
                         r"|partition-id)(-start)?\(")


def _through_layout(entry, name):
    while entry[name][1] in ("bitcast", "reshape", "copy"):
        name = entry[name][2][0]
    return name


def _attention_halves(text, value):
    """(the weights of the dots by a parameter other than x, the number of weightless dots) ``value`` is computed
    from, walking back through every op but a collective, a slice at the device's offset or a parameter reached
    other than by such a dot; None where it reaches one of those."""
    entry = entry_instructions(text)
    weights, weightless, todo, seen = set(), 0, [value], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        _, opcode, ops, rest = entry[name]
        body = _body(text, rest)
        if opcode == "parameter" or _COLLECTIVE.search(f" {opcode}(") or any(_COLLECTIVE.search(line) for line in body):
            return None
        if _is_dot(text, opcode, rest):
            params = {_parameter_name(entry, _through_layout(entry, o)) for o in ops} - {None}
            if params - {"x"}:
                [weight] = params - {"x"}
                assert params == {"x", weight}, params  # a column half: x by one weight
                weights.add(weight)
                continue
            weightless += 1
        todo.extend(ops)
    return weights, weightless


@pytest.mark.parametrize("release", RELEASES)
def test_attentions_output_projection_closes_the_pair_of_its_heads(release):
    """attention_pair (a Llama's attention: RoPE, a causal mask, 8 q heads over 2 k/v heads), XLA's text: the one
    all-reduce sums a dot by o; that dot's other operand is computed, through no collective and no slice at the
    device's offset, from two weightless dots (q k^T, probs v) and dots by x and q, k and v; the sum has x's
    per-device elements. The tool: that all-reduce, its why naming o and the three column halves, head by head.
    With q said to be replicated (no column half: its dot by a weight on no axis of the sum's) it is no pair."""
    text, module, params, collectives = _found(release, "attention_pair")
    entry = entry_instructions(text)
    [summed] = [n for n, (_, op, _, _) in entry.items() if op == "all-reduce"]
    dot = _through_layout(entry, entry[summed][2][0])
    assert _is_dot(text, entry[dot][1], entry[dot][3])
    [down] = [_parameter_name(entry, o) for o in entry[dot][2] if _parameter_name(entry, o)]
    [activation] = [o for o in entry[dot][2] if not _parameter_name(entry, o)]
    assert down == "o" and _attention_halves(text, activation) == ({"q", "k", "v"}, 2)
    [x] = [n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="x"' in r]
    assert prod(dims(entry[x][0])) == prod(dims(entry[summed][0]))
    found = row_parallel_sums(module, collectives, params)
    assert list(found) == [summed]
    assert ("o P('model') is sharded on the dimension this matmul contracts, which the matmuls before it by "
            "k P(None, 'model') and q P(None, 'model') and v P(None, 'model') produced sharded over the heads and "
            f"attention combined head by head (softmax(q k^T) v), and the sum returns the activation to the pair's "
            f"input width (f32{list(dims(entry[summed][0]))})") in found[summed]
    replicated_q = tuple(t.model_copy(update={"sharding": [[], []]}) if t.path == "q" else t for t in params)
    assert row_parallel_sums(module, collectives, replicated_q) == {}
