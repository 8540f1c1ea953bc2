"""combined_parts on XLA's stored compiled text of combined_sums (no compile): XLA's all-reduce combiner joins
four sums into one tuple all-reduce, and each operand is traced as a collective of its own. The oracle is the
text, read with the regular expressions of tests/stored_hlo.py: the all-reduce's tuple shape (each part's shape
and bytes), its operands (the entry parameters each is computed from: w_in, w_out and x for the pair's sum,
embed and one token array for each lookup, h and u for the argument's partial sums), the get-tuple-element
that reads each part back (its users), and each operand's line (its stack frame in the text's tables)."""

import re
from math import prod

import pytest
from stored_hlo import DATA_MODEL, dims, entry_instructions, meaning_inputs, meaning_program, releases

from jax_shard_lint.passes.hlo.collective_intent import classify, parameters
from jax_shard_lint.passes.hlo.combined_parts import part_name, part_view, parts_why, traced_parts
from jax_shard_lint.passes.source.frames import DEFAULT_OWNERSHIP

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()
_WIDTH = {"f32": 4}


def _found(release, name="combined_sums"):
    text, module, found = meaning_program(release, name)
    inputs = meaning_inputs(release, name)
    params = parameters(inputs, ())
    return text, module, inputs, params, classify(found, module, params, DATA_MODEL)


def _combined(text):
    """The tuple all-reduce's (name, its parts' (dtype, dims), its operands)."""
    entry = entry_instructions(text)
    [summed] = [n for n, (shape, op, _, _) in entry.items() if op == "all-reduce" and shape.startswith("(")]
    shape, _, operands, _ = entry[summed]
    parts = [(dtype, tuple(int(d) for d in ds.split(",") if d))
             for dtype, ds in re.findall(r"(\w+)\[([\d,]*)\]", shape)]
    return summed, parts, operands


def _parameters_reached(entry, name):
    """The op_names of the entry parameters ``name`` is computed from (walking back through every operand)."""
    todo, seen, found = [name], set(), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        _, opcode, operands, rest = entry[n]
        if opcode == "parameter":
            found.add(re.search(r'op_name="([^"]*)"', rest).group(1))
        todo.extend(operands)
    return found


def _line(text, name):
    """The source line the text's metadata gives instruction ``name`` (its stack frame's file location)."""
    frame = re.search(r"stack_frame_id=(\d+)", entry_instructions(text)[name][3]).group(1)
    location = re.search(rf"^{frame} \{{file_location_id=(\d+) ", text, re.M).group(1)
    return int(re.search(rf"^{location} \{{file_name_id=\d+ function_name_id=\d+ line=(\d+) ", text, re.M).group(1))


def _line_display(source, via=None):
    return f"line {source.line}"


@pytest.mark.parametrize("release", RELEASES)
def test_each_operand_of_a_combined_all_reduce_is_an_all_reduce_of_its_own(release):
    """XLA's text: one all-reduce of four operands, f32[16,128] three times and f32[32,32]; each read back by a
    get-tuple-element of its index. The view: four parts named <all-reduce>#k, each that operand's shape and
    bytes, an all-reduce of that one operand in the view's module (the module as parsed keeps none), used by the
    users of its get-tuple-element, in the entry computation, on its operand's line; the combined op's bytes are
    the parts' sum."""
    text, module, _, _, collectives = _found(release)
    summed, shapes, operands = _combined(text)
    entry = entry_instructions(text)
    assert [s for _, s in shapes] == [(16, 128), (16, 128), (16, 128), (32, 32)] and len(operands) == 4
    reads = {re.search(r"index=(\d+)", rest).group(1): n for n, (_, op, ops, rest) in entry.items()
             if op == "get-tuple-element" and ops == [summed]}
    users = {n: sorted(u for u, (_, _, ops, _) in entry.items() if n in ops) for n in reads.values()}
    [entry_name] = re.findall(r"^ENTRY %([\w.\-]+) ", text, re.M)

    view = part_view(module, collectives, DEFAULT_OWNERSHIP)
    assert list(view.parts) == [summed]
    parts = view.parts[summed]
    assert view.collectives == parts
    [c] = [c for c in collectives if c.hlo_name == summed]
    assert c.bytes == sum(_WIDTH[t] * prod(s) for t, s in shapes)
    for k, (p, (dtype, shape), operand) in enumerate(zip(parts, shapes, operands)):
        assert p.hlo_name == part_name(summed, k) == f"{summed}#{k}"
        assert (p.kind, p.dtype, tuple(p.shape), p.bytes) == ("all-reduce", dtype, shape, _WIDTH[dtype] * prod(shape))
        assert (p.parts, p.why) == ([], None)
        ins = view.module.instruction(p.hlo_name)
        assert (ins.opcode, ins.operands, dims(ins.shape)) == ("all-reduce", (operand,), shape)
        assert module.instruction(p.hlo_name) is None
        assert sorted(u.name for u in view.module.users()[p.hlo_name]) == users[reads[str(k)]]
        assert view.module.computation_of(p.hlo_name) == entry_name
        assert p.source.line == _line(text, operand)
    assert part_view(None, collectives, DEFAULT_OWNERSHIP) is None


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", ["row_parallel", "gated_pair", "looks_up_rows"])
def test_programs_whose_all_reduces_each_sum_one_value_have_no_parts(release, name):
    """XLA's text: every all-reduce has one operand (no tuple); nothing is split and the collectives come back."""
    text, module, inputs, params, collectives = _found(release, name)
    entry = entry_instructions(text)
    assert all(len(ops) == 1 for _, op, ops, _ in entry.values() if op == "all-reduce")
    assert part_view(module, collectives, DEFAULT_OWNERSHIP) is None
    assert traced_parts(module, collectives, inputs, params, DATA_MODEL, DEFAULT_OWNERSHIP, _line_display) == (
        collectives, None)


@pytest.mark.parametrize("release", RELEASES)
def test_a_combined_all_reduce_says_each_parts_cause_with_its_bytes(release):
    """XLA's text: operand 0 is computed from w_in, w_out and x (the pair's sum), operands 1 and 2 from embed and
    one token array each (the two lookups, on one line), operand 3 from h and u (partial sums of an argument).
    The why: four values in 28.0 KiB; the pair's part with its 8.0 KiB naming w_out and w_in; the two lookups
    said once with their count, each 8.0 KiB, at their line; the argument's part counted as not traced."""
    text, module, inputs, params, collectives = _found(release)
    summed, shapes, operands = _combined(text)
    entry = entry_instructions(text)
    reached = [_parameters_reached(entry, o) for o in operands]
    assert reached == [{"w_in", "w_out", "x"}, {"embed", "first"}, {"embed", "second"}, {"h", "u"}]
    lookup_line = _line(text, operands[1])
    assert _line(text, operands[2]) == lookup_line != _line(text, operands[0])

    out, traced = traced_parts(module, collectives, inputs, params, DATA_MODEL, DEFAULT_OWNERSHIP, _line_display)
    [c] = [c for c in out if c.hlo_name == summed]
    unexplained = [x.model_copy(update={"why": None}) for x in out]
    assert unexplained == [x.model_copy(update={"why": None}) for x in collectives]
    pair, lookups, untraced = c.why.split("; ", 2)
    assert pair.startswith("4 values combined into one all-reduce (28.0 KiB): f32[16, 128] (8.0 KiB): the row-parallel "
                           "half of a tensor-parallel pair (Megatron's): w_out P('model') is sharded on the dimension "
                           "this matmul contracts, which the matmul before it by w_in P(None, 'model') produced "
                           "sharded"), pair
    assert lookups.startswith(f"2 of f32[16, 128] (8.0 KiB each): a vocabulary-parallel lookup at line {lookup_line}: "
                              "embed P('model') is sharded on its rows, so each device looks up only the rows in its "
                              "own shard and masks the rest, and the all-reduce over model sums the masked lookups "
                              "(every device then holds the whole f32[16, 128], 8.0 KiB)"), lookups
    assert untraced == "1 more not traced to a cause"
    parts = traced.parts[summed]
    assert [p.why is None for p in parts] == [False, False, False, True]
    assert parts[1].why == parts[2].why and "w_in" in parts[0].why and "embed" not in parts[0].why
    assert parts_why(c, parts) == c.why
    assert parts_why(c, parts[3:]) is None
    two = parts_why(c, parts[:2])
    assert two.startswith("2 values combined into one all-reduce (28.0 KiB): f32[16, 128] (8.0 KiB): the row-parallel ")
    assert "; f32[16, 128] (8.0 KiB): a vocabulary-parallel lookup at " in two and " of f32" not in two
    assert "not traced" not in parts_why(c, parts[:3])
