"""collective_intent on XLA's stored compiled texts (no compile): why each collective runs, and the operands
of the matmul an activation's partial sums come from. The oracle is the text, read with the regular
expressions of tests/stored_hlo.py: a collective's result shape and op_name (JAX marks the backward pass
``transpose(jvp(...))``), the parameters' per-device shapes, what the collective's operand and users are."""

import functools
import itertools
import re
from math import prod

import pytest
from stored_hlo import (
    COMPILED,
    DATA_MODEL,
    compiled_text,
    computations,
    dims,
    entry_instructions,
    instructions,
    meaning_inputs,
    meaning_program,
    parameter_number,
    releases,
    step_inputs,
)

from jax_shard_lint.passes.hlo.collective_intent import (
    classify,
    has_backward_pass,
    intent_of,
    parameters,
    partial_sum_operands,
)
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()


def _classified(release, name):
    text, module, found = meaning_program(release, name)
    inputs = meaning_inputs(release, name)
    collectives = classify(found, module, parameters(inputs, ()), DATA_MODEL)
    return text, module, inputs, {c.kind: c for c in collectives}


def _is_dot(text, opcode, rest):
    """A dot, or a fusion whose body holds one."""
    body = re.search(r"calls=%([\w.\-]+)", rest)
    return opcode == "dot" or (opcode == "fusion" and body is not None
                               and any(" dot(" in line for line in computations(text)[body.group(1)]))


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("program", ["weight_on_the_right", "weight_on_the_left", "fsdp_train_step"])
def test_a_weight_gathered_for_its_matmul_is_a_parameter_gather(release, program):
    """w P('data', None) all-gathered over data to its global f32[256,128] and read by a dot (the fusion that
    takes the gather holds one, or the gather is the dot's operand)."""
    text, _, _, found = _classified(release, program)
    c = found["all-gather"]
    entry = entry_instructions(text)
    assert dims(entry[c.hlo_name][0]) == (256, 128)
    assert any(_is_dot(text, op, r) for _, op, ops, r in entry.values() if c.hlo_name in ops)
    assert c.intent == "parameter-gather"


def _read_by_dot(text, value):
    """Whether a dot reads ``value`` of the entry, directly or through bitcasts and fusions that only copy or
    re-lay out (their bodies hold parameters, copies, bitcasts, reshapes and transposes only)."""
    entry = entry_instructions(text)
    todo, seen = [value], set()
    while todo:
        name = todo.pop()
        for user, (_, op, ops, rest) in entry.items():
            if name not in ops or user in seen:
                continue
            seen.add(user)
            if _is_dot(text, op, rest):
                return True
            body = re.search(r"calls=%([\w.\-]+)", rest)
            if op == "bitcast" or (op == "fusion" and body and all(
                    re.search(r" (parameter|copy|bitcast|reshape|transpose)\(", line)
                    for line in computations(text)[body.group(1)])):
                todo.append(user)
    return False


@pytest.mark.parametrize("release", RELEASES)
def test_a_one_dimensional_weight_gathered_for_its_matmul_is_a_parameter_gather(release):
    """gathers_a_vector: v P('data') all-gathered over data to its global f32[256], the dot's operand: a
    parameter of one dimension is gathered as any other."""
    text, _, _, found = _classified(release, "gathers_a_vector")
    c = found["all-gather"]
    entry = entry_instructions(text)
    assert dims(entry[c.hlo_name][0]) == (256,) and _read_by_dot(text, c.hlo_name)
    assert c.intent == "parameter-gather"


@pytest.mark.parametrize("release", RELEASES)
def test_a_slice_of_a_stack_shaped_like_a_layer_off_its_second_axis_is_no_layer_outside_a_loop(release):
    """gathers_a_column_of_a_stack: ws (4, 256, 256) P(None, None, 'data'); ws[:, 0, :] gathered over data is
    f32[4,1,256] in the text, (4, 256) without its unit dimension: the shape of a layer taken off ws's second
    axis, but the gather runs in the entry, in no loop body (no while in the text), so it is no layer a scan
    gathers: a reshard, though a matmul reads it."""
    text, _, _, found = _classified(release, "gathers_a_column_of_a_stack")
    c = found["all-gather"]
    entry = entry_instructions(text)
    assert dims(entry[c.hlo_name][0]) == (4, 1, 256) and " while(" not in text and _read_by_dot(text, c.hlo_name)
    assert c.intent == "reshard"


@pytest.mark.parametrize("release", RELEASES)
def test_a_weight_gathered_into_a_loop_that_multiplies_another_value_is_a_reshard(release):
    """carries_a_gathered_weight: w gathered whole (f32[256,128]) goes into a while loop's tuple and nowhere
    else; in the body its element (get-tuple-element index=2) is read by one fusion that multiplies it by a
    scalar (no dot in it), while the dot reads another element through a tanh fusion. No matmul reads the
    gathered w."""
    text, _, _, found = _classified(release, "carries_a_gathered_weight")
    c = found["all-gather"]
    entry = entry_instructions(text)
    assert dims(entry[c.hlo_name][0]) == (256, 128)
    [(tuple_name, _)] = [(n, op) for n, (_, op, ops, _) in entry.items() if c.hlo_name in ops and op == "tuple"]
    [body] = [re.search(r"body=%([\w.\-]+)", r).group(1) for _, op, ops, r in entry.values()
              if op == "while" and ops == [tuple_name]]
    ins = instructions(computations(text)[body])
    index = entry[tuple_name][2].index(c.hlo_name)
    [element] = [n for n, (_, op, _, r) in ins.items() if op == "get-tuple-element" and f"index={index}" in r]
    readers = [(op, r) for _, op, ops, r in ins.values() if element in ops]
    assert [op for op, _ in readers] == ["fusion"] and not _is_dot(text, *readers[0])
    assert any(" multiply(" in line for line in computations(text)[re.search(r"calls=%([\w.\-]+)", readers[0][1])
                                                                   .group(1)])
    assert any(_is_dot(text, op, r) for _, op, _, r in ins.values())
    assert c.intent == "reshard"


@pytest.mark.parametrize("release", RELEASES)
def test_an_input_gathered_for_an_elementwise_op_is_a_reshard(release):
    """x gathered whole, then tanh: no matmul reads the gathered x as it is (the gather's one user is a
    fusion without a dot), so no sharding of a parameter asked for it."""
    text, _, _, found = _classified(release, "gathered_activation")
    c = found["all-gather"]
    users = [(op, r) for _, op, ops, r in entry_instructions(text).values() if c.hlo_name in ops]
    assert users and not any(_is_dot(text, op, r) for op, r in users)
    assert c.intent == "reshard"


@pytest.mark.parametrize("release", RELEASES)
def test_partial_sums_of_a_forward_matmul_are_an_activation_and_name_its_operands(release):
    """row_parallel: the all-reduce sums a dot's partial products (its operand is the dot's fusion) in a
    program with no backward pass (no op_name says transpose(): no gradient here). The smaller operand of
    that dot is x's shard f32[32,128] (16 KiB, what gathering instead would move); the larger is w."""
    text, module, _, found = _classified(release, "row_parallel")
    c = found["all-reduce"]
    assert "transpose(" not in text and not has_backward_pass(module)
    assert c.intent == "activation"
    entry = entry_instructions(text)
    [producer] = entry[c.hlo_name][2]
    operand_bytes = sorted(4 * dims(entry[o][0])[0] * dims(entry[o][0])[1] for o in entry[producer][2])
    assert operand_bytes == [32 * 128 * 4, 128 * 64 * 4]
    assert partial_sum_operands(tuple(found.values()), module) == {
        c.hlo_name: (operand_bytes[0], parameter_number(text, "w"))}


@pytest.mark.parametrize("release", RELEASES)
def test_a_weights_gradient_summed_transposed_is_a_gradient_reduction(release):
    """fsdp_train_step: the all-reduce XLA emits for the backward pass (its op_name says transpose(jvp(...)))
    sums w's gradient over data as f32[128,256], w's f32[256,128] transposed: a gradient reduction, also
    when intent_of is asked alone (a program with gradients is the default)."""
    text, module, inputs, found = _classified(release, "fsdp_train_step")
    c = found["all-reduce"]
    line = next(line for line in computations(text)["ENTRY"] if f"%{c.hlo_name} = " in line)
    assert "transpose(" in re.search(r'op_name="([^"]*)"', line).group(1)
    assert dims(entry_instructions(text)[c.hlo_name][0]) == (128, 256)
    assert c.intent == "gradient-reduction"
    assert intent_of(c, module, parameters(inputs, ()), DATA_MODEL, module.users()) == "gradient-reduction"


@pytest.mark.parametrize("release", RELEASES)
def test_a_masked_gather_from_a_sharded_table_is_a_reshard(release):
    """table[ids]: XLA all-reduces the masked per-device reads (the all-reduce's result is the looked-up
    rows, f32[8,16], no parameter's shape): resharding no stated sharding asked for."""
    text, _, _, found = _classified(release, "looks_up_rows")
    c = found["all-reduce"]
    assert dims(entry_instructions(text)[c.hlo_name][0]) == (8, 16)
    assert c.intent == "reshard"


@functools.cache
def _step(release, name):
    """A stored TPU or GPU step's text and its collectives with their intent."""
    text = compiled_text(release, name)
    mesh, inputs = step_inputs(text, name)
    module = parse_hlo_module(text)
    collectives = classify(find_collectives(module, mesh).collectives, module, parameters(inputs, ()), mesh)
    return text, inputs, collectives


def _squeezed(shape):
    return tuple(n for n in shape if n != 1)


STEPS = [pytest.param(r, n, id=f"{r}-{n}") for r in releases(COMPILED)
         for n in ("maxtext-like-scan.tpu-v5e", "llama-512.h100", "llama-1024.tpu-v5p", "fsdp-tp.h100")]


def _layers(shape, sharding):
    """One layer of a stack of three or more dimensions: the shape without one unsharded axis."""
    return {_squeezed(shape[:i] + shape[i + 1:]) for i in range(len(shape)) if len(shape) >= 3 and not sharding[i]}


@pytest.mark.parametrize("release, name", STEPS)
def test_gathers_of_a_whole_parameter_or_layer_and_reductions_to_a_shard_are_fsdp_traffic(release, name):
    """Shapes read in the text against the parameters' (the ENTRY lines' per-device shapes, the examples'
    PartitionSpecs): an all-gather whose result is a parameter whole, or one layer of a stack (a stack of
    three or more dimensions without one unsharded axis: MaxText's (embed, layers, mlp) loses its second),
    is a parameter gather; a reduce-scatter or all-reduce whose result is a parameter's shard, whole or
    layer is its gradient's reduction; an all-gather whose result is no parameter's shard with any of its
    axes gathered (nor a layer of one) gathers an activation, whatever its size. Unit dimensions are
    dropped (XLA keeps or drops them)."""
    text, inputs, collectives = _step(release, name)
    mesh, _ = step_inputs(text, name)
    sizes = dict(mesh.axes)
    floats = [t for t in inputs if t.dtype.startswith(("f", "bf"))]
    whole = {_squeezed(t.shape) for t in floats}
    layers = {s for t in floats for s in _layers(t.shape, t.sharding)}
    shards = {_squeezed(dims(line.split(" = ")[1])) for line in computations(text)["ENTRY"]
              if " parameter(" in line and line.split(" = ")[1].startswith(("f32", "bf16"))}
    partly = set()  # each parameter's shard with any set of its mesh axes gathered, and its layers
    for t in floats:
        for kept in itertools.product(*[[a, ()] for a in sizes]):
            split = [-(-n // prod(sizes[a] for a in axes if a in kept)) for n, axes in zip(t.shape, t.sharding)]
            partly |= {_squeezed(split)} | _layers(split, t.sharding)
    gathers = [c for c in collectives if c.kind == "all-gather" and _squeezed(c.shape) in whole | layers]
    reductions = [c for c in collectives if c.kind in ("all-reduce", "reduce-scatter")
                  and _squeezed(c.shape) in whole | layers | shards]
    activations = [c for c in collectives if c.kind == "all-gather" and _squeezed(c.shape) not in partly]
    assert [c.intent for c in gathers] == ["parameter-gather"] * len(gathers)
    assert [c.intent for c in reductions] == ["gradient-reduction"] * len(reductions)
    assert activations and "parameter-gather" not in {c.intent for c in activations}
    if name.startswith("maxtext"):  # the stacks' layers, off their second axis, gathered in the scan
        assert [c for c in gathers if _squeezed(c.shape) in layers - whole and c.count > 1]
    if not name.startswith("fsdp-tp"):  # (its gathers leave tp sharded: neither whole nor a layer)
        assert len(gathers) >= 2 and reductions


def _ring_steps(text):
    """collective-permute start -> (in the backward pass, what its done's value reaches through bitcasts and
    copies: 'matmul' (a dot or convolution, or a fusion holding one), 'add' (an add, or a fusion that adds
    and calls no fusion), 'loop' (the tuple a while body returns: the ring's next step, in the next iteration),
    'start' (the tuple a while loop starts from: the ring's next step, in the loop's first iteration))."""
    comps = computations(text)
    bodies = set(re.findall(r"body=%([\w.\-]+)", text))
    out = {}
    for name, lines in comps.items():
        ins = instructions(lines)
        roots = {re.match(r"^\s*ROOT %([\w.\-]+)", line).group(1) for line in lines if "ROOT %" in line}
        loop_starts = {ops[0] for _, op, ops, _ in ins.values() if op == "while"}
        users: dict[str, list[str]] = {}
        for n, (_, _, ops, _) in ins.items():
            for o in ops:
                users.setdefault(o, []).append(n)
        for done, (_, opcode, ops, _) in ins.items():
            if opcode != "collective-permute-done":
                continue
            [start] = ops
            backward = "transpose(" in (re.search(r'op_name="([^"]*)"', ins[start][3]) or ["", ""])[1]
            todo, seen, reached = [done], set(), set()
            while todo:
                for user in users.get(todo.pop(), []):
                    if user in seen:
                        continue
                    seen.add(user)
                    _, op, _, rest = ins[user]
                    called = re.search(r"calls=%([\w.\-]+)", rest)
                    body = comps[called.group(1)] if called and op == "fusion" else []
                    if op in ("dot", "convolution") or any(re.search(r" (convolution|dot)\(", b) for b in body):
                        reached.add("matmul")
                    elif op == "add" or (any(" add(" in b for b in body) and not any(" fusion(" in b for b in body)):
                        reached.add("add")
                    elif op == "tuple" and user in roots and name in bodies:
                        reached.add("loop")
                    elif op == "tuple" and user in loop_starts:
                        reached.add("start")
                    elif op in ("bitcast", "copy"):
                        todo.append(user)
            out[start] = (backward, frozenset(reached))
    return out


@pytest.mark.parametrize("release", releases(COMPILED))
@pytest.mark.parametrize("name", ["llama-512.tpu-v5e", "fsdp-tp.tpu-v5e"])
def test_a_tpu_collective_matmuls_ring_steps_are_its_gather_and_its_gradients_reduction(release, name):
    """libtpu splits an FSDP gather (and its gradient's reduce-scatter) into a ring of collective-permutes,
    one step per matmul. Read in the text: a step whose value a matmul reads, or that goes into a loop's
    carried tuple (the next step, in the loop's first or next iteration), is the parameter's gather; a step
    of the backward pass whose value is added to (the partial sum that arrived plus this device's part) is
    the gradient's reduction; a forward step that is added to is neither."""
    text, _, collectives = _step(release, name)
    ring = _ring_steps(text)
    permutes = [c for c in collectives if c.kind == "collective-permute"]
    seen = set()
    for c in permutes:
        backward, reached = ring[c.hlo_name]
        if reached == {"add"}:
            expected = "gradient-reduction" if backward else "reshard"
        elif reached in ({"matmul"}, {"loop"}, {"start"}):
            expected = "parameter-gather"
        else:
            continue
        seen.add((backward, reached))
        assert c.intent == expected, (c.hlo_name, backward, reached)
    assert (True, frozenset({"add"})) in seen and (True, frozenset({"matmul"})) in seen
    if name.startswith("llama"):
        assert {(False, frozenset({"loop"})), (False, frozenset({"matmul"}))} <= seen
        assert (False, frozenset({"start"})) in seen  # ring steps before a loop, into the tuple it starts from
