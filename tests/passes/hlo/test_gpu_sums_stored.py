"""The collective passes on the sums XLA's GPU compiler makes in other forms than CPU's (stored H100 texts, no
compile): fsdp_tp_train_step's tensor-parallel pair summed by a reduce-scatter over tp (fixtures/compiled,
generate_compiled_texts.py), a lookup's scatter-add gradient summed over fsdp, and combined_sums's four sums
flattened and concatenated into one buffer for one all-reduce (fixtures/hlo/meaning-h100, generate_meaning_texts.py
--platform h100).

The oracle is the text, read with the regular expressions of tests/stored_hlo.py: an op's op_name (behind the
bitcasts XLA left without one), its replica groups, the elements of a reduce-scatter's operand and of the
activation the up projection reads, the concatenate's parameters in order."""

import re
from math import prod

import pytest
from stored_hlo import (
    COMPILED,
    DATA_MODEL,
    MEANING_H100,
    MEANING_SPECS,
    compiled_text,
    computations,
    dims,
    entry_inputs,
    entry_instructions,
    instructions,
    meaning_text,
    releases,
    step_inputs,
)

from jax_shard_lint.passes.hlo.collective_intent import classify, parameters
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.combined_parts import traced_parts
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.tensor_parallel_pairs import column_parallel_gradient_sums, row_parallel_sums
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_OP_NAME = re.compile(r'op_name="([^"]*)"')
_TP_PAIRS = "replica_groups=[4,2]<=[8]"  # (fsdp 4, tp 2): devices 2k and 2k+1 together, tp's groups


def _all_instructions(text):
    return {n: v for lines in computations(text).values() for n, v in instructions(lines).items()}


def _named_behind(ops, name):
    """The op_name of ``name`` or, where XLA left it none, of the first op behind it that has one."""
    for _ in range(6):
        _, opcode, operands, rest = ops[name]
        found = _OP_NAME.search(rest)
        if found or not operands:
            return found.group(1) if found else None
        name = operands[0]
    return None


def _fsdp_tp(release):
    text = compiled_text(release, "fsdp-tp.h100")
    mesh, inputs = step_inputs(text, "fsdp-tp.h100")
    module = parse_hlo_module(text)
    params = parameters(inputs, ())
    return text, module, params, classify(find_collectives(module, mesh).collectives, module, params, mesh)


@pytest.mark.parametrize("release", releases(COMPILED))
def test_a_pairs_reduce_scatter_is_its_sum(release):
    """One reduce-scatter over tp (single operand) sums a forward matmul's result (its operand's op_name, behind
    the bitcasts XLA left unnamed, is bsf,fd->bsd's without transpose(...)); its operand has as many elements as
    the up projection's gathered activation (the bsd,df->bsf matmul's operand gathered over tp). It is the pair's
    sum (intended, with up and down named); the backward reduce-scatters over tp (their matmul's op_name
    transpose(jvp(...))) are not."""
    text, module, params, collectives = _fsdp_tp(release)
    ops = _all_instructions(text)
    scatters = {n: v for n, v in ops.items() if v[1] in ("reduce-scatter", "reduce-scatter-start")
                and len(v[2]) == 1 and _TP_PAIRS in v[3]}
    forward = [n for n in scatters if "transpose(" not in (_named_behind(ops, n) or "transpose(")]
    backward = sorted(set(scatters) - set(forward))
    assert len(forward) == 1 and "bsf,fd->bsd" in _named_behind(ops, forward[0]) and backward
    [summed] = scatters[forward[0]][2]
    up_matmuls = [v for v in ops.values() if v[1] == "fusion" and "kind=kCustom" in v[3]
                  and "bsd,df->bsf/dot_general" in v[3] and "transpose(" not in v[3]]
    gathered_inputs = set()
    for operand in (o for v in up_matmuls for o in v[2]):
        while ops[operand][1] in ("bitcast", "all-gather-done"):
            operand = ops[operand][2][0]
        shape, opcode, _, rest = ops[operand]
        if opcode in ("all-gather", "all-gather-start") and _TP_PAIRS in rest:
            gathered_inputs.add(prod(int(d) for d in re.findall(r"\w+\[([\d,]*)\]", shape)[-1].split(",") if d))
    assert gathered_inputs == {prod(dims(ops[summed][0]))}
    found = row_parallel_sums(module, collectives, params)
    assert sorted(found) == forward
    assert "params['layers']['down']" in found[forward[0]] and "params['layers']['up']" in found[forward[0]]
    intents = {c.hlo_name: c.intent for c in collectives}
    assert intents[forward[0]] == "activation"


@pytest.mark.parametrize("release", releases(COMPILED))
def test_the_backward_reduce_scatters_over_tp_are_column_parallel_input_gradients(release):
    """Each backward reduce-scatter over tp (its matmul's op_name transpose(jvp(...)) behind the bitcasts XLA left
    unnamed) sums a matmul named for the up (bsd,df->bsf) or the mix (bsd,de->bse) projection, both P(None,
    'fsdp', 'tp'): column-parallel, their outputs split over tp. Each sum is that weight's input gradient,
    Megatron's backward all-reduce split into a reduce-scatter, said with the weight named: up's and mix's, one
    each (before: activation, no reason; the matmul reads the layer's weight through the tuple JAX's remat passes
    the gathered weights in)."""
    text, module, params, collectives = _fsdp_tp(release)
    ops = _all_instructions(text)
    backward = {}
    for n, v in ops.items():
        named = _named_behind(ops, n) or ""
        if v[1] in ("reduce-scatter", "reduce-scatter-start") and len(v[2]) == 1 and _TP_PAIRS in v[3] \
                and "transpose(" in named:
            backward[n] = "params['layers']['up']" if "bsd,df->bsf" in named else \
                "params['layers']['mix']" if "bsd,de->bse" in named else None
    assert sorted(backward.values()) == ["params['layers']['mix']", "params['layers']['up']"]
    found = column_parallel_gradient_sums(module, collectives, params)
    assert sorted(found) == sorted(backward)
    for n, weight in backward.items():
        assert found[n].startswith("the backward pass of a column-parallel matmul") \
            and f"{weight} P(None, 'fsdp', 'tp') produced its output split over tp" in found[n]


@pytest.mark.parametrize("release", releases(COMPILED))
def test_a_lookups_gradient_summed_over_fsdp_is_a_gradient(release):
    """The all-reduce whose operand is a fusion holding a scatter, named transpose(jvp())/scatter-add (the embedding
    lookup's gradient, params['embed'] replicated, tokens sharded on fsdp), is a gradient's reduction, not a
    reshard (SL105 at loss_fn's lookup line, where the user can do nothing)."""
    text, module, params, collectives = _fsdp_tp(release)
    ops = _all_instructions(text)
    bodies = computations(text)
    lookups = [n for n, (_, opcode, operands, rest) in ops.items() if opcode.startswith("all-reduce")
               and not opcode.endswith("-done") and len(operands) == 1 and ops[operands[0]][1] == "fusion"
               and "scatter-add" in (_named_behind(ops, operands[0]) or "")
               and any(" scatter(" in line for line in bodies[re.search(r"calls=%([\w.\-]+)",
                                                                         ops[operands[0]][3]).group(1)])]
    assert len(lookups) == 1
    assert {c.hlo_name: c.intent for c in collectives}[lookups[0]] == "gradient-reduction"


@pytest.mark.parametrize("form", ["", ".cublas"])
@pytest.mark.parametrize("release", releases(MEANING_H100))
def test_a_concatenated_sum_is_read_value_by_value(release, form):
    """combined_sums on H100: the entry's one all-reduce sums a fusion that only concatenates its four parameters
    in order, each a flattened (bitcast) value. The combined sum is the parts' (activation, as on CPU) and is
    read value by value: four parts of those values' shapes, the first (the pair's product by w_out) explained
    as the pair's sum, the two outputs of the fusion that gathers embed's rows as its lookups (as on CPU)."""
    text = meaning_text(release, f"combined_sums{form}", MEANING_H100)
    entry = entry_instructions(text)
    [summed] = [n for n, v in entry.items() if v[1] in ("all-reduce", "all-reduce-start")]
    [cat] = entry[summed][2]
    body = computations(text)[re.search(r"calls=%([\w.\-]+)", entry[cat][3]).group(1)]
    [root] = [line for line in body if "ROOT" in line]
    numbers = dict(re.findall(r"%([\w.\-]+) = \S+ parameter\((\d+)\)", "\n".join(body)))
    assert " concatenate(" in root and [numbers[o] for o in re.findall(r"%([\w.\-]+)", root.split("(", 1)[1])[
        :len(entry[cat][2])]] == ["0", "1", "2", "3"]
    values, lookups = [], []
    [embed] = [n for n, v in entry.items() if v[1] == "parameter" and 'op_name="embed"' in v[3]]
    for k, flat in enumerate(entry[cat][2]):
        while entry[flat][1] == "bitcast":
            flat = entry[flat][2][0]
        values.append(dims(entry[flat][0]))
        _, opcode, operands, _ = entry[flat]
        fusion = entry[operands[0]] if opcode == "get-tuple-element" else None
        if fusion is not None and embed in fusion[2] and any(
                " gather(" in line for line in computations(text)[re.search(r"calls=%([\w.\-]+)", fusion[3]).group(1)]):
            lookups.append(k)  # one output of a fusion that gathers rows of embed
    module = parse_hlo_module(text)
    inputs = entry_inputs(text, DATA_MODEL, MEANING_SPECS["combined_sums"])
    params = parameters(inputs, ())
    collectives = classify(find_collectives(module, DATA_MODEL).collectives, module, params, DATA_MODEL)
    assert {c.hlo_name: c.intent for c in collectives}[summed] == "activation"
    out, traced = traced_parts(module, collectives, inputs, params, DATA_MODEL, DEFAULT_OWNERSHIP,
                               lambda source, via: str(source))
    parts = traced.parts[summed]
    assert [tuple(p.shape) for p in parts] == values
    assert "row-parallel half of a tensor-parallel pair" in parts[0].why and "w_out" in parts[0].why
    assert lookups == [1, 2] and all(parts[k].why.startswith("a vocabulary-parallel lookup") and "embed P('model')"
                                     in parts[k].why for k in lookups)
    assert {c.hlo_name: c.why for c in out}[summed].startswith("4 values combined into one all-reduce")
