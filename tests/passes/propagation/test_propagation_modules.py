"""``propagate`` on hand-written StableHLO modules, one per Shardy semantic it
follows (fixtures/propagation/modules/): each agrees with Shardy's
``sdy-propagation-pipeline``, run here on the same module, on every value it
reports; modules Shardy rejects are one-line input errors."""

import json
import os
import re

import pytest
from conftest import FIXTURES

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.propagation.report import agreement, run_propagation

MODULES = os.path.join(FIXTURES, "propagation", "modules")
AGREEING = ["several_meshes", "different_meshes", "non_divisible", "size_one_axes", "propagation_barrier",
            "shard_map_free_axes", "token_argument", "no_name_no_attributes", "non_flat_call_graph",
            "nested_clones_call_graph"]


def _module(name):
    with open(os.path.join(MODULES, name + ".mlir"), encoding="utf-8") as f:
        return jax_adapter.parse_stablehlo(f.read())


@pytest.mark.parametrize("name", AGREEING)
def test_agrees_with_shardy_on_every_value(name):
    module = _module(name)
    a = agreement(run_propagation(module), module)
    assert a.reported > 0 and a.compared == a.reported, a.not_compared
    assert a.agreeing == a.compared, [(d.value, d.ours, d.shardy) for d in a.disagreements]


def test_each_module_exercises_what_it_names():
    # The semantics, read off Shardy's output, not ours: a module that stopped
    # exercising its feature would pass the agreement test for nothing.
    from jax_shard_lint.passes.propagation.shardy_reference import shardy_propagated

    def shardings(name):
        return str(shardy_propagated(_module(name)))

    # Inside the cond's branch: the transpose of P('x', 'y'), on the real mesh.
    assert '[{"y"}, {"x"}]' in shardings("several_meshes").split("stablehlo.transpose")[1].split("\n")[0]
    assert '{"x":(1)2}' in shardings("non_divisible")  # the call's result: only what divides
    assert '"b"' in shardings("shard_map_free_axes").split("sdy.manual_computation")[1].split("manual_axes")[0]
    assert '{"b", "a"}' in shardings("shard_map_free_axes")  # the free axis comes out after the manual one


def test_call_graph_is_flattened_as_shardy_flattens_it():
    # Shardy's own sdy-flatten-call-graph is the oracle: the same clones, names and call targets.
    from jax_shard_lint.passes.propagation.call_graph import flatten_call_graph
    from jax_shard_lint.passes.propagation.shardy_reference import run_pipeline

    for name, clones in (("non_flat_call_graph", ("@scale_1", "@block_2")),
                         ("nested_clones_call_graph", ("@inner_0", "@inner_1", "@inner_0_2", "@mid_3"))):
        module = _module(name)
        theirs = run_pipeline(module, "builtin.module(sdy-flatten-call-graph)")
        ours = flatten_call_graph(module)
        # Shardy marks its clones for its export's merging; propagation does not read the mark.
        assert str(ours) == re.sub(r" attributes \{sdy.original_func_name = \"\w+\"\}", "", str(theirs)), name
        assert all(f"func.func private {c}(" in str(ours) for c in clones), (name, str(ours))
        assert flatten_call_graph(ours) is ours  # already flat: no copy


def test_propagate_runs_without_a_name_or_attributes(cli):
    result = cli("propagate", os.path.join(MODULES, "no_name_no_attributes.mlir"), "--format", "json")
    assert result.code == 0, result.err
    t = json.loads(result.out)["targets"][0]
    assert t["not_compiled"] is None  # named and renamed for XLA, compiled
    assert t["agreement_with_shardy"]["fraction"] == 1.0


def test_propagate_runs_with_a_token_argument(cli):
    result = cli("propagate", os.path.join(MODULES, "token_argument.mlir"), "--format", "json")
    assert result.code == 0, result.err
    a = json.loads(result.out)["targets"][0]["agreement_with_shardy"]
    assert a["compared"] == a["reported"] == 2


@pytest.mark.parametrize("name, message", [
    ("shardy_rejects", "Shardy rejects the module: line 6: 'sdy.data_flow_edge' op expected input of "
                       "sdy.data_flow_edge to not be defined by an SdyDialect op (other than an "
                       "sdy.named_computation)."),
    ("several_functions_no_main", "Shardy rejects the module: 2 functions and none named main (Shardy's pipeline "
                                  "needs @main when a module has several functions)"),
])
def test_a_module_shardy_rejects_is_one_line(cli, name, message):
    path = os.path.join(MODULES, name + ".mlir")
    result = cli("propagate", path, "--no-compile")
    assert result.code == 2
    assert result.err.strip() == f"jax-shard-lint: error: {path}: {message}"


def test_nothing_compared_reports_no_fraction():
    from jax_shard_lint.passes.models.propagation import ShardyAgreement
    from jax_shard_lint.reports.common.agreement_text import agreement_text

    a = ShardyAgreement(reported=3, compared=0, agreeing=0, fraction=None,
                        not_compared={"Shardy replaced the op": 3}, disagreements=[])
    assert agreement_text(a) == ("agreement with Shardy: no value compared; 0 of 3 reported values compared "
                                 "(3 not: Shardy replaced the op)")


def test_a_script_target_shardy_rejects_is_one_line(cli, monkeypatch):
    """A script's target whose module Shardy's passes refuse is the user's input, as a .mlir module's is:
    one line naming the script and the target, exit 2 (it was an internal error, exit 3). No program JAX
    lowers was found that Shardy refuses (custom_partitioning, shard_map in a scan, callbacks, conflicting
    shard_alike groups, GSPMD lowering), so the propagation raises here what it raises for the hand-written
    module above."""
    from jax_shard_lint.analyzer.commands import propagate as command
    from jax_shard_lint.passes.models.errors import ShardyRejected

    said = ("line 6: 'sdy.data_flow_edge' op expected input of sdy.data_flow_edge to not be defined by an "
            "SdyDialect op (other than an sdy.named_computation).")

    def rejected(*_args, **_kwargs):
        raise ShardyRejected(said)

    monkeypatch.setattr(command, "propagate_module", rejected)
    path = os.path.join("fixtures", "scripts", "sl204_uneven_sharding.py")
    result = cli("propagate", path, "--target", "uneven", "--no-compile")
    assert result.code == 2, result.err
    assert result.err.strip() == f"jax-shard-lint: error: {path}: target 'uneven': Shardy rejects the module: {said}"
