"""``suggest`` checks each plan against propagation: the layout it prices is the
one Shardy's own pipeline reaches from the plan's arguments, and an argument
sharding Shardy carries where the plan did not want it is excluded before the
next solve. On the Flax NNX transformer the first plan's embedding table (its
feature dimension on ``data``) leaks into every activation after the lookup."""

import os

import pytest
from ci_deps import require
from conftest import EXAMPLES

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend.advice.problem import refine
from jax_shard_lint.analyzer.backend.script_targets import load_script_targets
from jax_shard_lint.analyzer.backend.sharding_edits import with_entry_shardings
from jax_shard_lint.analyzer.commands.suggest.target import SuggestRequest, target_problem
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.analyzer.platforms.performance import device_spec
from jax_shard_lint.passes.pipelines.propagate import build_report
from jax_shard_lint.passes.pipelines.suggest import pins
from jax_shard_lint.passes.solver.sharding_problem import restrict_groups

NNX = os.path.join(EXAMPLES, "models", "nnx_transformer.py")
EMBEDDING = "state[0]['embed']['embedding'].value"

require("flax", "flax is not installed (the [test] extra)", allow_module_level=True)


@pytest.fixture(scope="module")
def nnx():
    loaded = load_script_targets(NNX, (), (), Settings())
    lowered = next(iter(loaded.targets.values()))
    t = target_problem("train_step", lowered, SuggestRequest(path=NNX), loaded.settings, {}, loaded.where)
    return t, refine(t, t.problem, "auto", 60.0, device_spec("cpu"))


def _pinned_text(t, plan) -> str:
    a = plan.solution.assignment
    return with_entry_shardings(t.module, pins(plan.problem, a, plan.problem.results), t.sig.mesh_name,
                                pins(plan.problem, a, plan.problem.arguments))


def test_each_plans_propagated_layout_is_shardys(nnx):
    t, refined = nnx
    assert len(refined.plans) >= 2
    for plan in refined.plans:
        report, _ = build_report("plan", jax_adapter.parse_stablehlo(_pinned_text(t, plan)), max_values=0)
        shardy = report.agreement_with_shardy
        assert shardy.compared > 700 and shardy.agreeing == shardy.compared, plan.solve


def test_the_embedding_that_leaks_is_excluded_from_the_next_solve(nnx):
    t, refined = nnx
    first, second = refined.plans[:2]
    index = [x.path for x in t.sig.inputs].index(EMBEDDING)
    assert first.check.culprits[0][0] == (index, 1, "data")  # the table's feature dimension on data
    group = first.problem.arguments[index]
    table = first.problem.groups[group].candidates[first.solution.assignment.groups[group]]
    assert "data" in table[1]
    assert (index, 1, "data") in second.excluded
    left = second.problem.groups[group].candidates
    assert left and all("data" not in c[1] for c in left)
    # Shardy carries that axis onto the lookup's feature dimension (every value agrees
    # with Shardy's pipeline), where the plan had none.
    report, _ = build_report("plan", jax_adapter.parse_stablehlo(_pinned_text(t, first)), max_values=None)
    assert report.agreement_with_shardy.agreeing == report.agreement_with_shardy.compared
    lookups = [v for v in report.values if v.shape == [32, 128, 512] and "_take" in (v.op_name or "")]
    assert lookups and all("data" in v.sharding[2] for v in lookups)
    planned = {first.problem.groups[g].candidates[first.solution.assignment.groups[g]]
               for g in first.check.differing}
    assert any(s[2] == () and s[0] for s in planned if len(s) == 3)


def test_restricting_a_group_cuts_every_table_alike(nnx):
    t, _ = nnx
    problem = t.problem
    group = next(g for g in problem.groups if len(g.candidates) > 3 and g.pinned is None)
    cut = restrict_groups(problem, {group.id: (0, 2)})
    assert cut.groups[group.id].candidates == (group.candidates[0], group.candidates[2])
    for before, after in zip(problem.ops, cut.ops):
        for u, v in zip(before.uses, after.uses):
            rows = [tuple(r[i] for i in (0, 2)) for r in u.seconds] if u.group == group.id else list(u.seconds)
            assert list(v.seconds) == rows
