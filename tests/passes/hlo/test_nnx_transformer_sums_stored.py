"""The sums of examples/models/nnx_transformer.py's training step on its Megatron layout (two blocks, each an up
projection P(None, 'model') with a replicated bias and a down projection P('model', None); the tied embedding
P('model', None)), XLA's texts stored for 8 CPU devices and 8 compile-only H100 devices (fixtures/hlo/meaning and
meaning-h100, generate_meaning_texts.py's STEPS; no compile here).

The oracle is the text, read with the regular expressions of tests/stored_hlo.py: each single-operand all-reduce
over model (replica groups [4,2]<=[8]), its op_name (forward, or the backward pass's transpose(jvp(...))), and the
matmul behind it (through bitcasts and GPU's split-K reduce fusion: a fusion whose computation holds a dot) with
the entry parameters it reads by JAX's path. The up projection's fusion reads the replicated bias and
partition-id: each device cuts the bias to the part of the output it computes, which is no cut of the
activation."""

import re
from math import prod

import pytest
from stored_hlo import (
    DATA_MODEL,
    MEANING,
    MEANING_H100,
    computations,
    dims,
    entry_instructions,
    meaning_inputs,
    meaning_text,
    releases,
)

from jax_shard_lint.passes.hlo.collective_intent import classify, parameters
from jax_shard_lint.passes.hlo.collective_parameter import sliced_partial_sums
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.combined_parts import traced_parts
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.tensor_parallel_pairs import column_parallel_gradient_sums, row_parallel_sums
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

STORED = [(folder, release) for folder in (MEANING, MEANING_H100) for release in releases(folder)]
_MODEL_GROUPS = "replica_groups=[4,2]<=[8]"  # (data 4, model 2): devices 2k and 2k+1 together, model's groups
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


def _program(folder, release):
    text = meaning_text(release, "nnx_transformer", folder)
    module = parse_hlo_module(text)
    inputs = meaning_inputs(release, "nnx_transformer", folder)
    params = parameters(inputs, ())
    return text, module, inputs, params, classify(find_collectives(module, DATA_MODEL).collectives, module, params,
                                                  DATA_MODEL)


def _body(text, rest):
    called = re.search(r"calls=%([\w.\-]+)", rest)
    return computations(text).get(called.group(1), []) if called else []


def _weights_read(text, entry, value):
    """The paths of the entry parameters that the matmul ``value`` is (behind bitcasts, and GPU's split-K: a fusion
    of one operand that reduces and multiplies nothing) reads, behind bitcasts; None where no matmul is reached."""
    while entry[value][1] == "bitcast" or (entry[value][1] == "fusion" and len(entry[value][2]) == 1 and not any(
            " dot(" in line for line in _body(text, entry[value][3]))):
        value = entry[value][2][0]
    _, opcode, operands, rest = entry[value]
    if opcode != "fusion" or not any(" dot(" in line for line in _body(text, rest)):
        return None
    paths = set()
    for o in operands:
        while entry[o][1] == "bitcast":
            o = entry[o][2][0]
        if entry[o][1] == "parameter":
            paths.add(_OP_NAME.search(entry[o][3]).group(1).replace("\\'", "'"))
    return paths


def _model_sums(text):
    """name -> (whether its op_name is the backward pass's, the weights its matmul reads), of the entry's sums
    over model of one operand that is a matmul's result."""
    entry = entry_instructions(text)
    out = {}
    for name, (_, opcode, operands, rest) in entry.items():
        if opcode in ("all-reduce", "all-reduce-start") and len(operands) == 1 and _MODEL_GROUPS in rest:
            weights = _weights_read(text, entry, operands[0])
            if weights is not None:
                out[name] = ("transpose(" in _OP_NAME.search(rest).group(1), weights)
    return out


@pytest.mark.parametrize(("folder", "release"), STORED)
def test_both_blocks_down_projection_sums_are_their_pairs(folder, release):
    """The two forward sums over model of a matmul by a down kernel (one per block): each the row-parallel half of
    its block's pair, with that block's up kernel named, and neither a slice each device cut (the up projection's
    fusion reads partition-id only to cut the replicated bias). Before, the fusion's partition-id and dynamic-slice
    stopped the walk and the sums were 'sliced' (SL103's candidates)."""
    text, module, _, params, collectives = _program(folder, release)
    forward = {n: w for n, (backward, w) in _model_sums(text).items() if not backward}
    downs = {n: [p for p in w if "['down']['kernel']" in p] for n, w in forward.items()}
    assert sorted(p for ps in downs.values() for p in ps) == [
        "state[0]['blocks'][0]['down']['kernel'].value", "state[0]['blocks'][1]['down']['kernel'].value"]
    up_fusions = [rest for _, opcode, ops, rest in entry_instructions(text).values()
                  if opcode == "fusion" and "partition-id" in " ".join(ops)]
    assert up_fusions  # the bias cut at the device's offset, where XLA fused it with the activation
    found = row_parallel_sums(module, collectives, params)
    pairs = {n for n, ps in downs.items() if ps}
    assert set(found) == pairs
    for n in pairs:
        block = re.search(r"\['blocks'\]\[(\d)\]", downs[n][0]).group(1)
        assert f"state[0]['blocks'][{block}]['down']['kernel'].value P('model')" in found[n]
        assert f"state[0]['blocks'][{block}]['up']['kernel'].value P(None, 'model')" in found[n]
    assert not sliced_partial_sums(module, collectives) & pairs


@pytest.mark.parametrize(("folder", "release"), STORED)
def test_the_backward_sums_are_column_parallel_input_gradients(folder, release):
    """The backward sums over model (op_name transpose(jvp(...))) of a matmul by an up kernel or the embedding (the
    tied logits projection, P('model', None): its output, the vocabulary, split over model): the input gradient
    of a column-parallel matmul, Megatron's backward all-reduce, classified intended with that weight named
    (before: activation with no reason). Where XLA combined one with another value (CPU's tuple, GPU's
    concatenation), that part is said so in the combined sum's why."""
    text, module, inputs, params, collectives = _program(folder, release)
    backward = {n: w for n, (back, w) in _model_sums(text).items() if back}
    assert backward and all(any("['up']['kernel']" in p or "['embed']['embedding']" in p for p in w)
                            for w in backward.values())
    found = column_parallel_gradient_sums(module, collectives, params)
    assert set(backward) <= set(found)
    for n, weights in backward.items():
        [weight] = [p for p in weights if "kernel" in p or "embedding" in p]
        assert f"{weight} P(" in found[n] and "backward pass of a column-parallel matmul" in found[n]
    entry = entry_instructions(text)
    combined = []
    for name, (_, opcode, operands, rest) in entry.items():
        values = _summed_values(text, entry, operands) if opcode in ("all-reduce", "all-reduce-start") else []
        first = (_weights_read(text, entry, values[0]) or set()) if len(values) > 1 else set()
        if _MODEL_GROUPS in rest and any("['up']['kernel']" in p for p in first) \
                and "transpose(" in _OP_NAME.search(entry[values[0]][3]).group(1):
            combined.append(name)
    out, _ = traced_parts(module, collectives, inputs, params, DATA_MODEL, DEFAULT_OWNERSHIP, lambda s, v: str(s))
    whys = {c.hlo_name: c.why or "" for c in out}
    assert combined and all("backward pass of a column-parallel matmul" in whys[n] and "['up']['kernel']" in whys[n]
                            for n in combined)


def _summed_values(text, entry, operands):
    """The values a sum adds at once, behind the bitcasts that flattened them: a tuple's operands, or those of the
    one fusion that concatenates them (GPU's combiner); a single value otherwise."""
    if len(operands) == 1 and entry[operands[0]][1] == "fusion" and any(
            " concatenate(" in line for line in _body(text, entry[operands[0]][3])):
        operands = entry[operands[0]][2]
    values = []
    for v in operands:
        while entry[v][1] == "bitcast":
            v = entry[v][2][0]
        values.append(v)
    return values


@pytest.mark.parametrize("release", releases(MEANING_H100))
def test_gpus_concatenated_gradient_sums_are_gradients(release):
    """On H100 the weights' gradients are summed over data in concatenated buffers (one all-reduce of a flat
    f32[N]): the largest value of each is made in the backward pass (op_name transpose(jvp(...))) and has a
    parameter's per-device shape. The combined sum's intent is its values' (gradient-reduction), where its flat
    shape read as a reshard or as partial sums of its first value."""
    text, module, inputs, params, collectives = _program(MEANING_H100, release)
    entry = entry_instructions(text)
    shards = {tuple(d for d in dims(shape) if d != 1) for shape, opcode, _, _ in entry.values()
              if opcode == "parameter"}
    data_sums = []
    for name, (_, opcode, operands, rest) in entry.items():
        values = _summed_values(text, entry, operands) if opcode == "all-reduce-start" else []
        if _MODEL_GROUPS in rest or len(values) < 2:
            continue
        largest = max(values, key=lambda v: prod(dims(entry[v][0])))
        named = _OP_NAME.search(entry[largest][3])
        if named and "transpose(" in named.group(1) and tuple(d for d in dims(entry[largest][0]) if d != 1) in shards:
            data_sums.append(name)
    assert data_sums
    out, _ = traced_parts(module, collectives, inputs, params, DATA_MODEL, DEFAULT_OWNERSHIP, lambda s, v: str(s))
    intents = {c.hlo_name: c.intent for c in out}
    assert [intents[n] for n in data_sums] == ["gradient-reduction"] * len(data_sums)

