"""Our sharding propagation, held against Shardy's on the same StableHLO."""

import json
import os
import sys

import pytest
from conftest import FIXTURES

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.common.axes import compatible_major, join_factors, split_for_factors
from jax_shard_lint.passes.propagation.report import agreement, run_propagation

sys.path.insert(0, os.path.join(FIXTURES, "propagation"))
import corpus  # noqa: E402

X, Y = ("x", 1, 4), ("y", 1, 2)


@pytest.fixture(scope="module")
def corpus_agreement():
    results = {}
    for name, lowered in corpus.lower_all().items():
        module = jax_adapter.parse_stablehlo(lowered.as_text(debug_info=True))
        results[name] = agreement(run_propagation(module), module)
    return results


def test_corpus_covers_the_op_families():
    assert len(corpus.PROGRAMS) >= 25
    for family in ("elementwise", "broadcast", "dot_batched", "dot_contract_lhs_major", "dot_transposed_rhs",
                   "reshape_merge", "reshape_split", "transpose", "reductions", "concatenate", "pad", "slices",
                   "dynamic_slices", "gather", "scatter", "convolution", "scan", "while_loop", "cond", "shard_map",
                   "nested_jit"):
        assert family in corpus.PROGRAMS


KNOWN_DISAGREEMENTS = os.path.join(os.path.dirname(__file__), "known_disagreements.json")


def test_the_disagreements_with_shardy_are_the_known_ones(corpus_agreement):
    """Not a bar (">= 95%" let ~29 new disagreements land silently): every disagreement, per program, is one
    known_disagreements.json lists for this JAX release. A new one fails; so does a listed one that is gone
    (the list only shrinks: delete it there)."""
    import jax

    with open(KNOWN_DISAGREEMENTS) as f:
        known = json.load(f)[".".join(jax.__version__.split(".")[:2])]
    for name, a in corpus_agreement.items():
        found = [[d.value, d.op_name, d.ours, d.shardy] for d in a.disagreements]
        listed = known.get(name, [])
        new = [d for d in found if d not in listed]
        gone = [d for d in listed if d not in found]
        assert not new, f"{name}: {len(new)} new disagreements with Shardy: {new}"
        assert not gone, f"{name}: {len(gone)} disagreements are gone; delete them from {KNOWN_DISAGREEMENTS}: {gone}"
    compared = sum(a.compared for a in corpus_agreement.values())
    assert compared > 900
    # Values are paired by op identity: nearly every reported value is compared.
    reported = sum(a.reported for a in corpus_agreement.values())
    assert compared >= 0.97 * reported, {n: a.not_compared for n, a in corpus_agreement.items() if a.not_compared}


def test_every_program_mostly_agrees(corpus_agreement):
    low = {n: a.fraction for n, a in corpus_agreement.items() if a.fraction is None or a.fraction < 0.85}
    assert not low


def test_factor_projection_splits_axes_into_sub_axes():
    # A dimension of 256 on x (4) split into factors 2 x 128: x:(1)2 and x:(2)2, as Shardy does.
    assert split_for_factors((X, Y), [2, 128]) == [(("x", 1, 2),), (("x", 2, 2), Y)]
    assert join_factors([(("x", 1, 2),), (("x", 2, 2), Y)], [2, 128]) == (X, Y)
    # A later factor is sharded only when every earlier one is whole.
    assert join_factors([(), (X,)], [2, 128]) == ()
    # 66 rows on x (4): the minor-most factor takes the whole axis (Shardy pads) ...
    assert split_for_factors((X,), [66]) == [(X,)]
    # ... a major factor only the part of x that divides it; the rest overflows.
    assert split_for_factors((X, Y), [66, 8]) == [(("x", 1, 2),), ()]


def test_compatible_major_axes_follow_shardy():
    assert compatible_major((X,), (X, Y), True) == ((X, Y), True)
    assert compatible_major((X, Y), (X, ("z", 1, 2)), True) == ((X,), False)
    assert compatible_major((("x", 1, 2),), (X,), True) == ((X,), True)
    assert compatible_major((X,), (X, Y), False) == ((X,), False)


def test_propagate_json(cli):
    result = cli("propagate", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_grid",
                 "--format", "json")
    assert result.code == 0, result.err
    t = json.loads(result.out)["targets"][0]
    assert t["agreement_with_shardy"]["fraction"] == 1.0
    v_next = next(v for v in t["values"] if v["name"] == "%arg0")
    assert v_next["sharding"] == [[], ["x"]] and v_next["seed"] == "argument v_next"
    assert set(t["values"][0]) >= {"name", "shape", "sharding", "source", "provenance"}
    # The interpolation reads the sharded grid axis: predicted, and borne out by the compiled program.
    gathers = [p for p in t["predicted"] if p["op"] == "stablehlo.gather"]
    assert gathers and all(p["kind"] == "all-reduce" and p["matched_compiled"] for p in gathers)
    assert gathers[0]["source"]["line"] == 34


def test_propagate_explain(cli):
    result = cli("propagate", os.path.join("examples", "fsdp_tp_train_step.py"), "--explain", "result[0]['embed']",
                 "--no-compile")
    assert result.code == 0, result.err
    assert "why result[0]['embed']:" in result.out


def test_propagate_on_a_mlir_fixture(cli):
    path = os.path.join(FIXTURES, "hlo", "cpu_scan.mlir")
    result = cli("propagate", path, "--format", "json")
    assert result.code == 0, result.err
    t = json.loads(result.out)["targets"][0]
    assert t["name"] == "cpu_scan" and t["mesh"] == {"data": 4, "model": 2}
    assert t["agreement_with_shardy"]["fraction"] >= 0.95
    assert any(p["matched_compiled"] is not None for p in t["predicted"])


def test_bad_mlir_is_one_line(cli):
    path = os.path.join("fixtures", "bad_input", "not_stablehlo.mlir")
    result = cli("propagate", path)
    assert result.code == 2
    assert result.err.strip().startswith(f"jax-shard-lint: error: {path}: not a StableHLO module:")
    assert len(result.err.strip().splitlines()) == 1


def test_unknown_explain_value(cli):
    result = cli("propagate", os.path.join("examples", "value_function_step.py"), "--no-compile",
                 "--explain", "%nope")
    assert result.code == 2 and "--explain: no value named '%nope'" in result.err


def test_skipping_inert_steps_is_visiting_every_step(monkeypatch):
    """propagate's first sweep of a level skips the steps that cannot act; visiting every step
    (live=None on every level, as before) gives the same shardings, parents, meshes and counts."""
    from jax_shard_lint.passes.propagation import propagate as prop

    every_step = prop._fixpoint
    for name, lowered in corpus.lower_all().items():
        text = lowered.as_text(debug_info=True)
        skipping = run_propagation(jax_adapter.parse_stablehlo(text))
        monkeypatch.setattr(prop, "_fixpoint", lambda g, level, p, users, table, stats, live:
                            every_step(g, level, p, users, table, stats, None))
        visiting = run_propagation(jax_adapter.parse_stablehlo(text))
        monkeypatch.undo()
        assert [(t.dims, t.parent, t.mesh) for t in skipping.graph.tensors] == \
            [(t.dims, t.parent, t.mesh) for t in visiting.graph.tensors], name
        assert skipping.sweeps == visiting.sweeps, name
