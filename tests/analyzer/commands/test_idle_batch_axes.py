"""A batch that leaves a mesh axis idle (passes/rules/idle_batch_axes.py, SL105's finding; its fix compiled by
analyzer/backend/idle_batch_fixes.py): lint names the batch arguments and their PartitionSpec, and the batch on
every mesh axis, compiled and printed only measured better, as suggest's data-parallel baseline lays it out.

The oracle is JAX: the fixture's step lowered with its batch on P(('data', 'model')), as a user pastes the fix,
compiled by ``jax.jit(...).lower(...).compile()``; its collectives (XLA's compiled text) and ``memory_analysis()``
are the figures the finding's check must report."""

import json
import os

import jax
import pytest
from hlo_oracle import collective_bytes_per_step, xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "sl105_batch_leaves_axis_idle.py")
THRESHOLD = ("--threshold", "unexplained-reshard-bytes=4MiB")  # the fixture's own (its docstring)
BATCH = ["nodes", "edges", "senders", "receivers"]


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _targets(cli, *args):
    result = cli("lint", SCRIPT, *THRESHOLD, *args, "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


def _idle_batch(findings):
    return [f for f in findings if f["rule"] == "SL105" and f["parameters"] == BATCH]


def test_the_batch_on_one_axis_is_named_and_the_batch_on_both_is_measured_as_xla_compiles_it(cli, checking):
    """The finding names the four batch arguments and P('data'), stands for the resharding collectives over
    the idle 'model' axis no other finding explains, and its fix (the batch on P(('data', 'model'))) was
    compiled: its figures before and after equal XLA's for the step as written and as the fix pastes it."""
    [t] = _targets(cli)
    [f] = _idle_batch(t["findings"])
    assert f["parameter"] == "nodes" and f["parameter_sharding"] == [["data"], []]
    assert f["suggested_sharding"] == [["data", "model"], []]
    assert "leave mesh axis 'model' idle" in f["message"]
    assert f["fix"].startswith("shard the batch arguments on dimension 0 over every mesh axis, as suggest's "
                               "data-parallel baseline does: nodes, edges, senders and receivers as "
                               "P(('data', 'model')) instead of P('data') (checked: "), f["fix"]
    over_model = {c["hlo_name"] for c in t["collectives"]
                  if c["intent"] == "reshard" and "model" in {a.split(":")[0] for a in c["mesh_axes"]}}
    others = {n for g in t["findings"] if g is not f for n in [g["subject"], *g["ops"]]}
    assert set(f["ops"]) == over_model - others and set(f["ops"]).isdisjoint(others)
    check = f["fix_check"]
    assert check["verdict"] == "better"

    module = script_module(SCRIPT)
    step = jax.jit(module.step, donate_argnums=0)
    written = step.lower(*module.arguments(P("data"))).compile()
    fixed = step.lower(*module.arguments(P(("data", "model")))).compile()
    assert check["collective_bytes_before"] == collective_bytes_per_step(written.as_text())
    assert check["collective_bytes_after"] == collective_bytes_per_step(fixed.as_text())
    assert check["peak_bytes_before"] == xla_peak(written)
    assert check["peak_bytes_after"] == xla_peak(fixed) < xla_peak(written)
    # The step's state (params) comes back on its own layout in both: its traffic is its collectives.
    assert check["traffic_bytes_after"] == check["collective_bytes_after"] < check["collective_bytes_before"]


def test_no_finding_where_the_batch_cannot_take_every_axis(cli):
    """16388 edges split 4 ways but not 8: suggest's data-parallel layout leaves them replicated, so there is
    no batch-on-every-axis fix, and the collectives over 'model' stay SL105's other findings or its note."""
    [t] = _targets(cli, "--set", "n_edge=16388")
    assert _idle_batch(t["findings"]) == []
    assert not any("idle" in f["message"] and f["rule"] == "SL105" for f in t["findings"])
