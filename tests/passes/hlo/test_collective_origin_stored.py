"""collective_origin on XLA's stored compiled texts (no compile): which input a collective's operand is, why
a collective runs, and which outputs depend on it or are its result. The oracle is the text, read with the
regular expressions of tests/stored_hlo.py: the collective's operand line (an entry ``parameter(N)`` and
the path JAX's metadata gives it), the gather's ``start_index_map``, the ROOT tuple's operands."""

import re

import pytest
from stored_hlo import (
    COMPILED,
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

from jax_shard_lint.passes.hlo.collective_origin import (
    collective_origins,
    outputs_depending_on,
    outputs_returning,
    reads_in,
)
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.value_origin import entry_parameter, origin_index
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()


def _origins(release, name):
    text, module, collectives = meaning_program(release, name)
    found = collective_origins(module, collectives, meaning_inputs(release, name), DEFAULT_OWNERSHIP)
    return text, module, {c.kind: c for c in found}


def _root_operands(text):
    [root] = [line for line in computations(text)["ENTRY"] if line.lstrip().startswith("ROOT ")]
    return re.findall(r"%([\w.\-]+)", root.split("tuple(", 1)[1])


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("program, path", [("weight_on_the_right", "w"), ("gathered_activation", "x")])
def test_an_all_gather_of_an_input_names_it_and_says_it_is_gathered_whole(release, program, path):
    """The gather's operand is the entry parameter JAX's metadata names ``path``, sharded on data."""
    text, module, found = _origins(release, program)
    c = found["all-gather"]
    entry = entry_instructions(text)
    [operand] = entry[c.hlo_name][2]
    assert entry[operand][1] == "parameter" and f'op_name="{path}"' in entry[operand][3]
    assert c.input_path == path
    assert c.why == (f"XLA all-gathers the whole of {path} P('data') over data onto every device: "
                     f"{c.dtype}{list(c.shape)} ({'128.0 KiB' if path == 'w' else '64.0 KiB'}) per device")
    number = int(re.search(r"parameter\((\d+)\)", next(line for line in computations(text)["ENTRY"]
                                                         if f"%{operand} = " in line)).group(1))
    assert entry_parameter(module, c.hlo_name, origin_index(module)) is None  # a gather is not its operand
    assert entry_parameter(module, operand, origin_index(module)) == number


@pytest.mark.parametrize("release", RELEASES)
def test_a_masked_gather_from_a_sharded_table_is_explained(release):
    """table[ids]: the all-reduce sums the masked reads of a gather whose start_index_map is {0}, the
    dimension the table is sharded on; its operand is no input."""
    text, _, found = _origins(release, "looks_up_rows")
    c = found["all-reduce"]
    assert {m for body in computations(text).values() for line in body
            for m in re.findall(r" gather\(.*start_index_map=\{([\d,]*)\}", line)} == {"0"}
    assert c.input_path is None
    assert re.fullmatch(
        r"the gather( at \S+)? reads table P\('data'\) along dimension 0, which is sharded on data: each device "
        r"reads only its own shard, and the all-reduce over data sums the masked partial results, so every "
        r"device holds the whole f32\[8, 16\] \(512 B\)", c.why), c.why


@pytest.mark.parametrize("release", RELEASES)
def test_partial_sums_of_a_matmul_have_no_input_and_no_why(release):
    """row_parallel: the all-reduce's operand is the dot's fusion (no input), and nothing reads along a
    sharded dimension: the pass says nothing."""
    text, _, found = _origins(release, "row_parallel")
    c = found["all-reduce"]
    [operand] = entry_instructions(text)[c.hlo_name][2]
    assert entry_instructions(text)[operand][1] == "fusion"
    assert (c.input_path, c.why) == (None, None)


@pytest.mark.parametrize("release", RELEASES)
def test_only_the_output_computed_from_a_gather_depends_on_it(release):
    """(x @ w, x * 2): the ROOT tuple's first operand is the dot's fusion, whose operand is the gather;
    the second is computed from x alone."""
    text, module, found = _origins(release, "gathers_for_one_output")
    c = found["all-gather"]
    entry = entry_instructions(text)
    first, second = _root_operands(text)
    assert c.hlo_name in entry[first][2] and c.hlo_name not in entry[second][2]
    assert outputs_depending_on(module, [c.hlo_name]) == {0: [c.hlo_name]}
    assert outputs_returning(module, [c.hlo_name]) == {}  # the output is the matmul's, not the gather's


@pytest.mark.parametrize("release", RELEASES)
def test_an_output_that_is_a_gather_is_returned_by_it(release):
    """(w gathered whole, x + 1): the ROOT tuple's first operand is the all-gather itself."""
    text, module, found = _origins(release, "returns_a_gathered_weight")
    c = found["all-gather"]
    first, second = _root_operands(text)
    assert first == c.hlo_name and second != c.hlo_name
    assert outputs_returning(module, [c.hlo_name]) == {0: [c.hlo_name]}
    assert outputs_depending_on(module, [c.hlo_name]) == {0: [c.hlo_name]}
    assert outputs_returning(module, []) == {} and outputs_depending_on(module, []) == {}


@pytest.mark.parametrize("release", RELEASES)
def test_an_output_computed_from_a_gather_is_not_returned_by_it(release):
    """weight_on_the_left returns tanh(dot(gathered w, x)): the ROOT is a tanh fusion of the dot, whose
    first operand is the gather; the output depends on the gather but is not its result moved."""
    text, module, found = _origins(release, "weight_on_the_left")
    c = found["all-gather"]
    entry = entry_instructions(text)
    [root] = [n for n, (_, op, ops, rest) in entry.items() if op == "fusion" and "ROOT" in next(
        line for line in computations(text)["ENTRY"] if f"%{n} = " in line)]
    [dot] = entry[root][2]
    assert entry[dot][1] == "dot" and entry[dot][2][0] == c.hlo_name
    assert outputs_returning(module, [c.hlo_name]) == {}
    assert outputs_depending_on(module, [c.hlo_name]) == {0: [c.hlo_name]}


@pytest.mark.parametrize("release", RELEASES)
def test_an_exchange_of_an_inputs_shards_names_it_and_is_no_gather(release):
    """w from P('data', None) to P(None, 'data'): XLA's all-to-all takes fusions that only slice and bitcast
    w's shard (its operand in the text), so it moves w; it gathers nothing, and reads along nothing."""
    text, _, found = _origins(release, "reshards_a_weight")
    c = found["all-to-all"]
    comps, entry = computations(text), entry_instructions(text)
    for operand in entry[c.hlo_name][2]:
        _, opcode, [source], rest = entry[operand]
        body = instructions(comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)])
        assert opcode == "fusion" and {op for _, op, _, _ in body.values()} <= {"parameter", "slice", "bitcast"}
        assert entry[source][1] == "parameter" and 'op_name="w"' in entry[source][3]
    assert (c.input_path, c.why) == ("w", None)


@pytest.mark.parametrize("release", RELEASES)
def test_a_collective_inside_a_loop_reaches_the_output_the_loop_returns(release):
    """scans_over_layers returns (the scan's carry, x * 2). XLA sums each layer's partial products in the
    loop's body (the all-reduce is in the while's body computation); the ROOT tuple's first operand is a
    get-tuple-element of the while, its second computed from x alone."""
    text, module, found = _origins(release, "scans_over_layers")
    c = found["all-reduce"]
    comps, entry = computations(text), entry_instructions(text)
    [loop] = [rest for _, op, _, rest in entry.values() if op == "while"]
    body = re.search(r"body=%([\w.\-]+)", loop).group(1)
    assert any(f"%{c.hlo_name} = " in line for line in comps[body])
    first, second = _root_operands(text)
    assert entry[first][1] == "get-tuple-element" and entry[entry[first][2][0]][1] == "while"
    assert entry[second][1] != "get-tuple-element"
    assert outputs_depending_on(module, [c.hlo_name]) == {0: [c.hlo_name]}


@pytest.mark.parametrize("release", RELEASES)
def test_a_stack_read_in_a_loop_body_is_the_entry_parameter_the_loop_started_from(release):
    """In the scan's body, the stack is an element of the loop's carried tuple (a get-tuple-element of the
    body's parameter, f32[4,64,256]: ws's per-device shape); the while starts from a tuple whose element
    at that index is ws's entry parameter."""
    text, module, _ = _origins(release, "scans_over_layers")
    comps, entry = computations(text), entry_instructions(text)
    [(init, loop)] = [(ops[0], rest) for _, op, ops, rest in entry.values() if op == "while"]
    body = instructions(comps[re.search(r"body=%([\w.\-]+)", loop).group(1)])
    [(stack, k)] = [(name, int(re.search(r"index=(\d+)", rest).group(1))) for name, (shape, op, _, rest)
                    in body.items() if op == "get-tuple-element" and shape.startswith("f32[4,64,256]")]
    started = entry[entry[init][2][k]]
    assert started[1] == "parameter" and 'op_name="ws"' in started[3]
    number = int(re.search(r"parameter\((\d+)\)", next(line for line in comps["ENTRY"]
                                                         if 'op_name="ws"' in line)).group(1))
    assert entry_parameter(module, stack, origin_index(module)) == number
    # The loop's counter, element 0, started from a constant: no entry parameter.
    [counter] = [name for name, (shape, op, _, rest) in body.items()
                 if op == "get-tuple-element" and re.search(r"index=0\b", rest)]
    assert entry_parameter(module, counter, origin_index(module)) is None


@pytest.mark.parametrize("release", RELEASES)
def test_an_output_computed_from_a_gather_by_a_fusion_of_it_alone_is_not_its_result(release):
    """tanh(w gathered whole): the ROOT is a fusion whose one operand is the gather and whose body computes
    (a tanh, not a copy or bitcast): the output depends on the gather, but is not its value moved."""
    text, module, found = _origins(release, "returns_tanh_of_a_gather")
    c = found["all-gather"]
    comps, entry = computations(text), entry_instructions(text)
    [root] = [line for line in comps["ENTRY"] if line.lstrip().startswith("ROOT ")]
    name = re.match(r"^\s*ROOT %([\w.\-]+)", root).group(1)
    _, opcode, operands, rest = entry[name]
    assert opcode == "fusion" and operands == [c.hlo_name]
    assert any(" tanh(" in line for line in comps[re.search(r"calls=%([\w.\-]+)", rest).group(1)])
    assert outputs_returning(module, [c.hlo_name]) == {}
    assert outputs_depending_on(module, [c.hlo_name]) == {0: [c.hlo_name]}


@pytest.mark.parametrize("release", RELEASES)
def test_a_gather_inside_a_conditionals_branch_is_read_without_failing(release):
    """lax.cond: XLA gathers w inside one branch, from a get-tuple-element of the branch's parameter (a
    conditional's, not a loop's). Whichever input the pass names, it is w or none, and it does not fail."""
    text, module, found = _origins(release, "gathers_in_a_branch")
    c = found["all-gather"]
    comps = computations(text)
    [branch] = [b for b in comps.values() if any(f"%{c.hlo_name} = " in line for line in b)]
    ins = instructions(branch)
    [operand] = ins[c.hlo_name][2]
    assert ins[operand][1] == "get-tuple-element" and ins[ins[operand][2][0]][1] == "parameter"
    assert any(" conditional(" in line for line in comps["ENTRY"])
    assert c.input_path in (None, "w")
    assert entry_parameter(module, operand, origin_index(module)) in (None, parameter_number(text, "w"))


@pytest.mark.parametrize("release", RELEASES)
def test_a_gather_from_a_transposed_copy_names_the_inputs_own_sharded_dimension(release):
    """table.T[ids], table f32[16,1024] P(None, 'data'): the gather reads a transposed copy of the table
    (transpose dimensions={1,0}) along its dimension 0 (start_index_map={0}): the table's dimension
    perm[0], the one on data. The all-reduce of the masked reads is explained by that dimension."""
    text, module, found = _origins(release, "looks_up_columns")
    c = found["all-reduce"]
    lines = [line for body in computations(text).values() for line in body]
    [perm] = [[int(d) for d in m.group(1).split(",")] for line in lines
              if (m := re.search(r" transpose\(.*dimensions=\{([\d,]*)\}", line))]
    [read] = [int(m.group(1)) for line in lines if (m := re.search(r" gather\(.*start_index_map=\{(\d+)\}", line))]
    dimension = perm[read]
    assert dimension == 1  # table's own numbering: P(None, 'data') shards dimension 1
    assert re.fullmatch(
        rf"the gather( at \S+)? reads table P\(None, 'data'\) along dimension {dimension}, which is sharded on "
        r"data: each device reads only its own shard, and the all-reduce over data sums the masked partial "
        r"results, so every device holds the whole f32\[8, 16\] \(512 B\)", c.why), c.why
    [operand] = entry_instructions(text)[c.hlo_name][2]
    [(_, number, read_dims)] = reads_in(module, module.by_name[operand], origin_index(module))
    assert (number, read_dims) == (parameter_number(text, "table"), (dimension,))


@pytest.mark.parametrize("release", releases(COMPILED))
def test_a_layer_gathered_from_a_stack_transposed_by_layout_is_not_read_along_its_sharded_dimension(release):
    """The llama step on TPU v5p: params['decoder']['wo'] is bf16[352,2,1024] a device (P('fsdp'): dimension
    0 sharded, dimension 1 the layers). XLA copies it with the layers major (layout {2,0,1}) and bitcasts
    that to bf16[2,352,1024]; the scan's body dynamic-slices one layer along that copy's dimension 0, and
    all-gathers the layer. The slice reads wo's dimension of the sliced size (the layers, dimension 1, not
    sharded): nothing says the gather runs because a read is along a sharded dimension. (The backward
    loop's gathers read the stack the forward loop returns: no entry parameter, left out.)"""
    name = "llama-1024.tpu-v5p"
    text = compiled_text(release, name)
    mesh, inputs = step_inputs(text, name)
    module = parse_hlo_module(text)
    found = {c.hlo_name: c for c in collective_origins(module, find_collectives(module, mesh).collectives,
                                                         inputs, DEFAULT_OWNERSHIP)}
    number = parameter_number(text, "params['decoder']['wo']")
    [wo_shape] = [m.group(1) for line in computations(text)["ENTRY"]
                  if (m := re.match(rf"^\s*%[\w.\-]+ = (\w+\[[\d,]*\])\S* parameter\({number}\)", line))]
    wo = dims(wo_shape)
    assert wo == (352, 2, 1024)
    # XLA's copy of wo with dimension 1 (the layers) major: minor_to_major {2,0,1}.
    assert re.search(r"= bf16\[352,2,1024\]\{2,0,1[:}]\S* copy\(", text)
    comps = computations(text)
    checked = 0
    for body in comps.values():
        for line in body:
            m = re.match(r"^\s*(?:ROOT )?%([\w.\-]+) = \S+ all-gather(?:-start)?\(%([\w.\-]+)\)", line)
            operand_line = m and next((op for op in body if op.lstrip().startswith(f"%{m.group(2)} = ")), None)
            called = operand_line and re.search(r" fusion\(.*calls=%([\w.\-]+)", operand_line)
            if not called or "/transpose(jvp())/" in operand_line:
                continue  # the backward loop reads the stack the forward loop returns, no entry parameter
            fused = instructions(comps[called.group(1)])
            slices = [(ops, shape) for shape, op, ops, _ in fused.values() if op == "dynamic-slice"]
            if len(slices) != 1:
                continue
            [(ops, _)] = slices
            source = dims(fused[ops[0]][0])
            if sorted(source) != sorted(wo) or source == wo:
                continue  # not a transposed copy of wo's shard
            [sliced] = [d for d, start in enumerate(ops[1:]) if fused[start][1] != "constant"]
            [in_wo] = [d for d, n in enumerate(wo) if n == source[sliced]]  # the size says which: 2, the layers
            assert (sliced, in_wo) == (0, 1)
            [(_, k, read_dims)] = reads_in(module, module.by_name[m.group(2)], origin_index(module))
            assert (k, read_dims) == (number, (in_wo,))
            assert found[m.group(1)].why is None
            checked += 1
    assert checked == 1  # the forward loop's gather of one layer of wo


# A layer of the fsdp-tp example's stacked weights (8 layers, d_model 1024, d_ff 4096, fsdp 4 x tp 2) as each
# device holds it and as an FSDP gather over fsdp rebuilds it: the shapes tell the three weights apart.
_LAYER_SHAPES = {"up": ((256, 2048), (1024, 2048)), "mix": ((256, 512), (1024, 512)),
                 "down": ((2048, 256), (2048, 1024))}


@pytest.mark.parametrize("release", releases(COMPILED))
@pytest.mark.parametrize("platform", ["tpu-v5e", "tpu-v5p"])
def test_a_layer_gather_of_a_stacked_weight_names_the_weight(release, platform):
    """In the scan's body each layer's weight reaches its all-gather through a slicing fusion, a layout copy
    and bitcast (``down`` is transposed by layout), on TPU also a fused async start and pieces put back
    (``ConcatBitcast``), and the backward loop reads what the forward loop carried unchanged; a TPU collective
    matmul passes the shard around a ring of collective-permutes. Each names the weight whose layer it moves:
    the oracle is the instruction's shape in the stored text (leading 1s dropped), one weight's each (named
    before this change: none of them)."""
    name = f"fsdp-tp.{platform}"
    try:
        text = compiled_text(release, name)
    except FileNotFoundError:
        pytest.skip(f"no stored {name} for {release}")
    mesh, inputs = step_inputs(text, name)
    module = parse_hlo_module(text)
    found = {c.hlo_name: c for c in collective_origins(module, find_collectives(module, mesh).collectives, inputs,
                                                        DEFAULT_OWNERSHIP)}
    expected = {}
    for body in computations(text).values():
        for ins, (shape, opcode, _, _) in instructions(body).items():
            if opcode not in ("all-gather", "collective-permute-start"):
                continue
            first = re.search(r"\w+\[[\d,]*\]", shape)  # a tuple's first array: an async start's operand
            squeezed = tuple(d for d in dims(first.group(0)) if d != 1) if first else ()
            if opcode == "all-gather":
                weight = next((w for w, (_, whole) in _LAYER_SHAPES.items() if squeezed == whole), None)
            elif opcode == "collective-permute-start":
                weight = next((w for w, (local, _) in _LAYER_SHAPES.items()
                               if re.match(rf"\(\w+\[1?,?{local[0]},{local[1]}\]", shape)), None)
            else:
                continue
            if weight is not None and ins in found:
                expected[ins] = f"params['layers']['{weight}']"
    gathers = {n: p for n, p in expected.items() if found[n].kind == "all-gather"}
    assert gathers and {n: found[n].input_path for n in gathers} == gathers
    # A ring of that shape may pass a gradient's partial sums instead (backward, f32, from no input): never
    # another weight, and the weights' own rings on TPU are named.
    rings = {n: p for n, p in expected.items() if n not in gathers}
    assert all(found[n].input_path in (None, p) for n, p in rings.items())
    assert platform != "tpu-v5e" or {found[n].input_path for n in rings} - {None}  # v5e rings its weights
