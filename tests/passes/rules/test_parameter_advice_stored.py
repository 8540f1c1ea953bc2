"""parameter_advice on XLA's stored compiled texts (no compile): the sharding to try for the parameter behind a
collective, and SL103's candidates for a weight sharded on two mesh axes whose contracted dimension holds the
summed one. The facts come from the text, read with the regular expressions of tests/stored_hlo.py: which
mesh axes the all-reduce's replica groups span, which dimension of the weight's per-device shape the dot
contracts (``lhs_/rhs_contracting_dims`` in the fusion that reads the parameter). The expected specs are
worked out by hand from those facts and the rule's contract: the summed (or gathered) axes off that
dimension, onto the last other dimension they divide beside the axes already there, else dropped; the
two-axis head's first candidate is the one test_two_axis_partial_sum_fix.py compiles and measures better."""

import re
from types import SimpleNamespace

import pytest
from stored_hlo import DATA_MODEL, computations, entry_instructions, meaning_inputs, meaning_program, releases

from jax_shard_lint.passes.hlo.collective_parameter import CollectiveParameter, ParameterRole, collective_parameters
from jax_shard_lint.passes.models.report import TensorInfo
from jax_shard_lint.passes.rules.parameter_advice import (
    contracted_axes_moves,
    contracted_dims,
    moved_off,
    moved_onto,
    sharding_advice,
)

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases()


def _context(release, name):
    text, module, collectives = meaning_program(release, name)
    inputs = meaning_inputs(release, name)
    ctx = SimpleNamespace(collective_parameters=collective_parameters(module, collectives, inputs, DATA_MODEL),
                          inputs=inputs, signature=SimpleNamespace(mesh=DATA_MODEL), argument_batch_dims={})
    return text, ctx, {c.kind: c for c in collectives}


def _contracted(text, parameter):
    """The dimension of the entry parameter JAX names ``parameter`` that the dot reading it contracts: the
    fusion holding the dot takes it as operand k, its body's parameter(k) is the dot's lhs or rhs."""
    entry = entry_instructions(text)
    [name] = [n for n, (_, op, _, rest) in entry.items() if op == "parameter" and f'op_name="{parameter}"' in rest]
    [(ops, rest)] = [(ops, rest) for _, op, ops, rest in entry.values() if op == "fusion" and name in ops
                     and any(" dot(" in line for line in computations(text)[re.search(r"calls=%([\w.\-]+)",
                                                                                      rest).group(1)])]
    body = computations(text)[re.search(r"calls=%([\w.\-]+)", rest).group(1)]
    k = ops.index(name)
    [inner] = [m.group(1) for line in body if (m := re.match(rf"^\s*%([\w.\-]+) = \S+ parameter\({k}\)", line))]
    [dot] = [line for line in body if " dot(" in line]
    side = "lhs" if re.search(r" dot\(%([\w.\-]+)", dot).group(1) == inner else "rhs"
    return {int(d) for d in re.search(rf"{side}_contracting_dims=\{{([\d,]*)\}}", dot).group(1).split(",")}


def _summed_axes(text):
    """The mesh axes the one all-reduce's groups span: its group size read off replica_groups (the listed
    groups' first, an iota's [groups,size], or a mesh's named axes), matched to the (data 4, model 2) mesh."""
    [line] = [line for line in computations(text)["ENTRY"] if " all-reduce(" in line]
    groups = re.search(r"replica_groups=(.*?), use_global_device_ids", line).group(1)
    if m := re.match(r"\{\{([\d,]+)\}", groups):
        size = len(m.group(1).split(","))
    elif m := re.match(r"\[(\d+),(\d+)\]", groups):
        size = int(m.group(2))
    else:
        named = dict(re.findall(r"'(\w+)'=(\d+)", groups))
        size = 1
        for axis in re.search(r"\{([^}]*)\}", groups).group(1).split(","):
            size *= int(named[axis.strip().strip("'")])
    return {4: ["data"], 2: ["model"], 8: ["data", "model"]}[size]


@pytest.mark.parametrize("release", RELEASES)
def test_a_weight_on_both_axes_contracting_the_summed_one_gets_it_moved_beside_the_other_then_dropped(release):
    """head_on_both_axes: w P('data', 'model') on (256, 512); XLA sums over data (groups of 4) the dot that
    contracts w's dim 0, which holds data; dim 1 holds model. No unsharded dimension is left (moved_off: None,
    so sharding_advice has none), so the candidates put data beside model on dim 1 (512 divides by 8), then
    drop it."""
    text, ctx, found = _context(release, "head_on_both_axes")
    c = found["all-reduce"]
    assert _summed_axes(text) == ["data"] == [a.split(":")[0] for a in c.mesh_axes]
    assert _contracted(text, "w") == {0}
    w = next(t for t in ctx.inputs if t.path == "w")
    parameter, served, advice = sharding_advice(ctx, c)
    assert parameter == w and served.index == w.index and advice is None
    assert contracted_dims(w, served) == {0}
    assert contracted_axes_moves(w, {0}, list(c.mesh_axes), DATA_MODEL) == [[[], ["model", "data"]], [[], ["model"]]]
    # The axis named by the sum, not every axis on the contracted dimension; one summed off its dimension
    # falls back to the axes the contracted dimension holds.
    assert contracted_axes_moves(w, {0}, ["model"], DATA_MODEL) == [[[], ["model", "data"]], [[], ["model"]]]
    assert contracted_axes_moves(w, {1}, ["model"], DATA_MODEL) == [[["data", "model"], []], [["data"], []]]


@pytest.mark.parametrize("release", RELEASES)
def test_a_weight_whose_contracted_dimension_holds_both_axes_gets_all_then_each_moved_then_dropped(release):
    """contracts_both_axes: w P(('data', 'model'), None) on (256, 512); XLA sums over all 8 devices the dot that
    contracts dim 0. sharding_advice moves both onto dim 1 (512 divides by 8). The candidates: both moved, each
    alone moved (the other staying), then each group dropped, in that order."""
    text, ctx, found = _context(release, "contracts_both_axes")
    c = found["all-reduce"]
    assert _summed_axes(text) == ["data", "model"] and _contracted(text, "w") == {0}
    w = next(t for t in ctx.inputs if t.path == "w")
    parameter, served, advice = sharding_advice(ctx, c)
    assert parameter == w and advice == [[], ["data", "model"]]
    assert contracted_axes_moves(w, {0}, ["data", "model"], DATA_MODEL) == [
        [[], ["data", "model"]], [["model"], ["data"]], [["data"], ["model"]],
        [[], []], [["model"], []], [["data"], []]]


@pytest.mark.parametrize("release", RELEASES)
def test_a_row_parallel_weight_gets_its_summed_axis_moved_to_the_dimension_it_keeps(release):
    """row_parallel: w P('model', None) on (256, 64), its dim 0 contracted (the text's dot), summed over model
    (groups of 2): model onto dim 1 (64 divides by 2)."""
    text, ctx, found = _context(release, "row_parallel")
    c = found["all-reduce"]
    assert _summed_axes(text) == ["model"] and _contracted(text, "w") == {0}
    w = next(t for t in ctx.inputs if t.path == "w")
    parameter, served, advice = sharding_advice(ctx, c)
    assert parameter == w and advice == [[], ["model"]]
    assert contracted_axes_moves(w, {0}, ["model"], DATA_MODEL) == [[[], ["model"]], [[], []]]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("program", ["weight_on_the_right", "weight_on_the_left"])
def test_a_weight_gathered_for_its_matmul_is_kept_off_the_gathered_dimension(release, program):
    """w P('data', None) on (256, 128) all-gathered over data for its dot: data onto dim 1 (128 divides by 4)."""
    _, ctx, found = _context(release, program)
    w = next(t for t in ctx.inputs if t.path == "w")
    parameter, _, advice = sharding_advice(ctx, found["all-gather"])
    assert parameter == w and advice == [[], ["data"]]


@pytest.mark.parametrize("release", RELEASES)
def test_a_sum_a_weight_multiplies_gets_no_move_where_its_contracted_dimension_holds_no_axis(release):
    """sums_then_multiplies: XLA all-reduces over data a reduction of x (no matmul's partial sums), and an
    entry dot reads the sum with w P(None, 'model') as its rhs, contracting w's dim 0, which holds no axis.
    Only an all-gather's weight is sharded to multiply the shards in place; for this sum there is nothing
    on the contracted dimension to move off."""
    text, ctx, found = _context(release, "sums_then_multiplies")
    c = found["all-reduce"]
    entry = entry_instructions(text)
    [w_name] = [n for n, (_, op, _, r) in entry.items() if op == "parameter" and 'op_name="w"' in r]
    [(ops, rest)] = [(ops, r) for _, op, ops, r in entry.values() if op == "dot"]
    assert ops[1] == w_name and re.search(r"rhs_contracting_dims=\{0\}", rest)
    assert not any(" dot(" in line for line in computations(text)[re.search(r"calls=%([\w.\-]+)",
                                                                               entry[entry[c.hlo_name][2][0]][3]).group(1)])
    w = next(t for t in ctx.inputs if t.path == "w")
    parameter, served, advice = sharding_advice(ctx, c)
    assert parameter == w and served.role is ParameterRole.feeds and advice is None


def _tensor(shape, sharding):
    return TensorInfo(index=0, path="w", shape=list(shape), dtype="f32", sharding=sharding, bytes=0,
                      per_device_bytes=0)


def test_moves_need_a_dimension_the_axes_divide():
    """Hand-worked: (256, 6) has no other dimension 4 divides; (256, 512, 8) moves to the largest one (512)."""
    sizes = dict(DATA_MODEL.axes)
    assert moved_off(_tensor((256, 6), [["data"], []]), {0}, sizes) is None
    assert moved_off(_tensor((256, 6), [[], []]), {0}, sizes) is None
    assert moved_off(_tensor((256, 8, 512), [["data"]]), {0}, sizes) == [[], [], ["data"]]
    assert moved_off(_tensor((256, 512, 512), [["data"]]), {0}, sizes) == [[], ["data"], []]
    assert moved_off(_tensor((256, 8, 512), [["model"], ["data"]]), {0, 1}, sizes) == [[], [], ["model", "data"]]
    # moved_onto: the gathered axes onto the first contracted dimension they divide, taken off elsewhere.
    assert moved_onto(_tensor((6, 256), [[], ["model"]]), {0, 1}, ["data"], sizes) is None
    assert moved_onto(_tensor((256, 128), [[], ["data"]]), {0}, ["data"], sizes) == [["data"], []]
    assert moved_onto(_tensor((256, 128), [["data"], []]), {0}, ["data"], sizes) is None
    assert moved_onto(_tensor((256, 128), [[], []]), {0}, [], sizes) is None
    assert moved_onto(_tensor((6, 256), [[], []]), {0, 1}, ["data", "model"], sizes) == [[], ["data", "model"]]
    assert moved_onto(_tensor((256, 8), [[], []]), {0, 1}, ["data", "model"], sizes) == [["data", "model"], []]


def test_an_axis_with_no_other_dimension_to_go_to_is_only_dropped():
    """Hand-worked: w (256, 6) P('data'): 6 does not divide by data's 4, so the one candidate drops data; with
    model on dim 1 too, (256, 12) fits data beside it for neither (12 % 8), so again dropped only."""
    assert contracted_axes_moves(_tensor((256, 6), [["data"], []]), {0}, ["data"], DATA_MODEL) == [[[], []]]
    assert contracted_axes_moves(_tensor((256, 12), [["data"], ["model"]]), {0}, ["data"], DATA_MODEL) == [
        [[], ["model"]]]


def test_a_two_dimensional_weight_without_the_matmuls_dimensions_contracts_its_sharded_ones():
    """Where the compiled matmul did not say (contracting None): a 2-D weight whose partial sums are added (or
    that SL103 named by size alone, no parameter found) contracted its sharded dimensions; a weight of another
    rank, or one a collective feeds, has none known. The matmul's own dimensions win when it gives them."""
    head = _tensor((256, 512), [["data"], ["model"]])
    assert contracted_dims(head, None) == {0, 1}
    assert contracted_dims(head, CollectiveParameter(0, ParameterRole.partial_sums, None)) == {0, 1}
    assert contracted_dims(_tensor((256, 512), [[], ["model"]]), None) == {1}
    assert contracted_dims(head, CollectiveParameter(0, ParameterRole.feeds, None)) == set()
    assert contracted_dims(_tensor((4, 256, 512), [[], ["data"], []]), None) == set()
    assert contracted_dims(_tensor((256,), [["data"]]), None) == set()
    assert contracted_dims(head, CollectiveParameter(0, ParameterRole.feeds, (1,))) == {1}
