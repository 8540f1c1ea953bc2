"""collective_parameter: which argument a compiled collective belongs to (the input it moves, the weight of
the matmul whose partial sums it adds, or of the matmul its result feeds) and the weight's dimensions that
matmul contracts. Read on XLA's stored compiled texts (no compile); the oracle is the text itself, read
with the regular expressions of tests/stored_hlo.py: the argument's number is the ``parameter(N)`` JAX's
metadata names, the contracted dimensions the dot's own ``lhs_/rhs_contracting_dims``."""

import re

import pytest
from stored_hlo import (
    COMPILED,
    DATA_MODEL,
    compiled_text,
    computations,
    dims,
    instructions,
    meaning_inputs,
    meaning_program,
    parameter_number,
    releases,
    step_inputs,
)

from jax_shard_lint.passes.hlo.collective_parameter import (
    ParameterRole,
    axis_size,
    collective_parameters,
    local_dims,
)
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()


def _parameters(release, name):
    text, module, collectives = meaning_program(release, name)
    found = collective_parameters(module, collectives, meaning_inputs(release, name), DATA_MODEL)
    return text, {c.kind: (c, found.get(c.hlo_name)) for c in collectives}


def _dot_reading(text, value):
    """(operand position, contracting dims) of the dot that reads ``value`` of the entry: a dot of the
    entry, or one inside the fusion it is an operand of (through the body's parameter(k))."""
    comps = computations(text)
    for _, opcode, operands, rest in instructions(comps["ENTRY"]).values():
        if value not in operands:
            continue
        if opcode == "dot":
            reader, body_name = rest, value
            position = operands.index(value)
        elif opcode == "fusion":
            k = operands.index(value)
            body = instructions(comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)])
            [param] = [m.group(1) for line in comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)]
                       if (m := re.match(rf"^\s*%([\w.\-]+) = .* parameter\({k}\)", line))]
            dots = [(ops, r) for _, op, ops, r in body.values() if op == "dot" and param in ops]
            if not dots:
                continue
            [(ops, reader)] = dots
            position, body_name = ops.index(param), param
        else:
            continue
        side = "lhs" if position == 0 else "rhs"
        contracting = tuple(int(d) for d in re.search(rf"{side}_contracting_dims=\{{([\d,]*)\}}", reader).group(1)
                            .split(","))
        return position, contracting, body_name
    return None


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("program, position", [("weight_on_the_right", 1), ("weight_on_the_left", 0)])
def test_a_weight_gathered_whole_names_the_dimension_its_matmul_contracts(release, program, position):
    """w P('data', None) gathered whole (f32[256,128], its global shape) and read by one dot, as its rhs
    (x @ w) or its lhs (dot_general(w, x) contracting w's first dimension): the parameter is w, the
    gather's operand, and its contracted dimension the dot's, on either side."""
    text, found = _parameters(release, program)
    c, p = found["all-gather"]
    entry = instructions(computations(text)["ENTRY"])
    [gather] = [n for n, (_, op, _, _) in entry.items() if op == "all-gather"]
    assert dims(entry[gather][0]) == (256, 128) and entry[gather][2] == [
        n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="w"' in r]
    read_at, contracting, _ = _dot_reading(text, gather)
    assert read_at == position  # the program reads w on that side of its dot
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "w"), ParameterRole.operand, contracting)


@pytest.mark.parametrize("release", RELEASES)
def test_a_weight_gathered_whole_then_cast_names_the_dimension_its_matmul_contracts(release):
    """x.astype(bf16) @ w.astype(bf16), w f32 P('data', None): XLA gathers w whole and casts it in a fusion
    of that one operand (its body only converts), which the dot reads as its rhs. A cast keeps the
    dimensions' order, so the contracted dimension is the dot's own."""
    text, found = _parameters(release, "casts_a_gathered_weight")
    c, p = found["all-gather"]
    comps = computations(text)
    entry = instructions(comps["ENTRY"])
    [(cast, rest)] = [(n, r) for n, (_, op, ops, r) in entry.items() if ops == [c.hlo_name]]
    body = instructions(comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)])
    assert entry[cast][1] == "fusion" and {op for _, op, _, _ in body.values()} == {"parameter", "convert"}
    position, contracting, _ = _dot_reading(text, cast)
    assert position == 1
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "w"), ParameterRole.operand, contracting)


@pytest.mark.parametrize("release", RELEASES)
def test_a_gathered_input_that_no_matmul_reads_as_it_is_has_no_contracted_dimension(release):
    """x P('data', None) gathered whole and put through tanh before its dot: the gather moves x (its
    operand is x's parameter), and no dot reads the gathered x itself, so no dimension is named."""
    text, found = _parameters(release, "gathered_activation")
    c, p = found["all-gather"]
    assert _dot_reading(text, c.hlo_name) is None
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "x"), ParameterRole.operand, None)


@pytest.mark.parametrize("release", RELEASES)
def test_partial_sums_name_the_weight_of_their_matmul_and_its_contracted_dimension(release):
    """x P(None, 'model') @ w P('model', None): each device multiplies its halves and XLA all-reduces the
    partial sums over model. They are w's (the larger operand of the dot that makes them), and w's
    per-device shape is the dot's operand as it is, so the contracted dimension is the dot's own."""
    text, found = _parameters(release, "row_parallel")
    c, p = found["all-reduce"]
    entry = instructions(computations(text)["ENTRY"])
    [producer] = entry[c.hlo_name][2]
    w = [n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="w"' in r][0]
    position, contracting, _ = _dot_reading(text, w)
    assert producer in [n for n, (_, _, ops, _) in entry.items() if w in ops]  # the dot's fusion is summed
    assert dims(entry[w][0]) == (128, 64) and position == 1
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "w"), ParameterRole.partial_sums,
                                                contracting)


@pytest.mark.parametrize("release", RELEASES)
def test_a_gather_from_a_sharded_table_names_the_table_and_the_dimension_it_indexes(release):
    """table[ids] with table P('data', None): XLA gathers from each device's rows, masks and all-reduces.
    The reduction reads the table (its number in the text) along dimension 0, the gather's
    start_index_map and the table's sharded dimension."""
    text, found = _parameters(release, "looks_up_rows")
    c, p = found["all-reduce"]
    maps = {m for body in computations(text).values() for line in body
            for m in re.findall(r" gather\(.*start_index_map=\{([\d,]*)\}", line)}
    assert maps == {"0"}
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "table"), ParameterRole.read, (0,))


@pytest.mark.parametrize("release", RELEASES)
def test_a_gather_from_a_transposed_table_names_the_tables_own_dimension(release):
    """table.T[ids], table P(None, 'data'): the gather reads the transposed copy along start_index_map={0},
    which is the table's dimension perm[0] (the transpose's dimensions={1,0}): 1, the one on data."""
    text, found = _parameters(release, "looks_up_columns")
    c, p = found["all-reduce"]
    lines = [line for body in computations(text).values() for line in body]
    [perm] = [[int(d) for d in m.group(1).split(",")] for line in lines
              if (m := re.search(r" transpose\(.*dimensions=\{([\d,]*)\}", line))]
    [read] = [int(m.group(1)) for line in lines if (m := re.search(r" gather\(.*start_index_map=\{(\d+)\}", line))]
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "table"), ParameterRole.read, (perm[read],))
    assert perm[read] == 1


@pytest.mark.parametrize("release", releases(COMPILED))
def test_a_layer_sliced_from_a_stack_transposed_by_layout_is_no_read_of_its_sharded_dimension(release):
    """The llama step on TPU v5p: one layer of params['decoder']['wo'] (bf16[352,2,1024] a device, P('fsdp'))
    is dynamic-sliced out of a copy with the layers major (bf16[2,352,1024]) and gathered: the slice reads
    wo's layer dimension, not the fsdp one, so no gather is wo's "read" along a sharded dimension."""
    name = "llama-1024.tpu-v5p"
    text = compiled_text(release, name)
    mesh, inputs = step_inputs(text, name)
    module = parse_hlo_module(text)
    found = collective_parameters(module, find_collectives(module, mesh).collectives, inputs, mesh)
    number = parameter_number(text, "params['decoder']['wo']")
    [line] = [line for line in computations(text)["ENTRY"] if re.search(rf" parameter\({number}\)", line)]
    assert re.search(r"= bf16\[352,2,1024\]", line)  # dimension 0 (352 = 2816 / 8) on fsdp, 1 the layers
    assert not [p for p in found.values() if p.role == ParameterRole.read and p.index == number]


@pytest.mark.parametrize("release", RELEASES)
def test_the_fsdp_train_steps_gather_is_its_weights(release):
    """The FSDP train step: w's gather is w's, with the dimension its forward dot contracts."""
    text, found = _parameters(release, "fsdp_train_step")
    c, p = found["all-gather"]
    assert (p.index, p.role) == (parameter_number(text, "w"), ParameterRole.operand)


@pytest.mark.parametrize("release", RELEASES)
def test_partial_sums_in_a_layer_scan_name_the_stack_and_the_stack_dimension_contracted(release):
    """scans_over_layers: ws f32[4,256,256] P(None, 'data', None), h @ ws[i] in a scan. XLA sums each layer's
    partial products over data inside the loop's body (the all-reduce's operand is a fusion holding the
    dot), reading the layer as a dynamic-slice of the carried stack. The partial sums are ws's; the dot
    contracts the layer's first dimension, the stack's second (dimension 1, the one on data)."""
    text, found = _parameters(release, "scans_over_layers")
    c, p = found["all-reduce"]
    comps = computations(text)
    [body] = [b for b in comps.values() if any(f"%{c.hlo_name} = " in line for line in b)]
    body_ins = instructions(body)
    [producer] = body_ins[c.hlo_name][2]
    fused = comps[re.search(r"calls=%([\w.\-]+)", body_ins[producer][3]).group(1)]
    assert any(" dot(" in line for line in fused)
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "ws"), ParameterRole.partial_sums, (1,))


@pytest.mark.parametrize("release", RELEASES)
def test_a_gathered_activation_names_the_weight_it_is_multiplied_by(release):
    """scans_over_square_layers: ws f32[4,256,256] P(None, None, 'data'). Each layer's product comes out
    sharded on data and XLA gathers it back (the scan's carry is replicated) in the loop's body; the
    next layer multiplies it, after a fusion of one operand (a copy), by a dynamic slice of the carried
    stack: the gather's parameter is ws, which its result is multiplied by. The dot contracts 256 elements,
    which ws's second and third dimensions both have: the size alone cannot tell which, so none is named."""
    text, found = _parameters(release, "scans_over_square_layers")
    c, p = found["all-gather"]
    comps = computations(text)
    [body] = [b for b in comps.values() if any(f"%{c.hlo_name} = " in line for line in b)]
    ins = instructions(body)
    [(copy, copy_rest)] = [(n, r) for n, (_, op, ops, r) in ins.items() if ops == [c.hlo_name]]
    assert ins[copy][1] == "fusion"  # one operand, the gather
    [(dot_fusion, operands, rest)] = [(n, ops, r) for n, (_, op, ops, r) in ins.items() if copy in ops]
    assert any(" dot(" in line for line in comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)])
    [layer] = [o for o in operands if o != copy]
    assert "dynamic-slice" in "".join(comps[re.search(r"calls=%([\w.\-]+)", ins[layer][3]).group(1)])
    assert (p.index, p.role, p.contracting) == (parameter_number(text, "ws"), ParameterRole.feeds, None)


@pytest.mark.parametrize("release", releases(COMPILED))
def test_a_gathered_activation_in_a_stored_gpu_step_names_the_weight_it_is_multiplied_by(release):
    """The FSDP x TP step compiled for H100: XLA gathers the final hidden state over the batch axes and a
    cuBLAS gemm fusion multiplies it, through a bitcast, by params['embed'] (an entry parameter). Read in
    the text: the gather's done, the bitcasts after it, the fusion holding a dot that reads them, and the
    fusion's other operand, an entry parameter(N); the gather's parameter is N, the weight it feeds."""
    text = compiled_text(release, "fsdp-tp.h100")
    mesh, inputs = step_inputs(text, "fsdp-tp.h100")
    module = parse_hlo_module(text)
    found = collective_parameters(module, find_collectives(module, mesh).collectives, inputs, mesh)
    comps = computations(text)
    entry = instructions(comps["ENTRY"])
    numbers = {n: int(re.search(r"parameter\((\d+)\)", line).group(1)) for line in comps["ENTRY"]
               if " parameter(" in line for n in [line.split(" = ")[0].strip().lstrip("%")]}
    expected = {}
    for start, (_, opcode, operands, _) in entry.items():
        if opcode != "all-gather-start" or operands[0] in numbers:
            continue
        values = [n for n, (_, op, ops, _) in entry.items() if op == "all-gather-done" and ops == [start]]
        values += [n for n, (_, op, ops, _) in entry.items() if op == "bitcast" and set(ops) & set(values)]
        for _, op, ops, rest in entry.values():
            called = re.search(r"calls=%([\w.\-]+)", rest)
            if op == "fusion" and set(ops) & set(values) and any(" dot(" in line for line in comps[called.group(1)]):
                weights = [numbers[o] for o in ops if o in numbers]
                if weights:
                    [expected[start]] = weights
    assert expected
    for start, number in expected.items():
        assert (found[start].index, found[start].role) == (number, ParameterRole.feeds)
        assert inputs[number].path == "params['embed']"


def test_local_dims_divide_by_every_axis_a_dimension_is_on():
    from jax_shard_lint.passes.models.report import TensorInfo

    t = TensorInfo(index=0, path="w", shape=[10, 64, 7], dtype="f32", sharding=[["data", "model"], ["model"]],
                   bytes=0, per_device_bytes=0)
    # ceil(10 / 8), 64 / 2, 7 unsharded (the spec is shorter than the rank)
    assert local_dims(t, {"data": 4, "model": 2}) == (2, 32, 7)
    assert axis_size("data:(2)2", {"data": 4}) == 2 and axis_size("model", {"data": 4}) == 1
