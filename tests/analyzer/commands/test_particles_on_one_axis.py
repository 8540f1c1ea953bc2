"""Particles split on one axis of a 4 x 2 mesh (issue 46, newbie19b F1 and F3 on jax-md;
fixtures/scripts/particles_on_one_axis.py). Each printed fix is the layout a user pastes, compiled here by
``jax.jit(...).lower(...).compile()``, its figures XLA's (memory_analysis(), the collectives in the compiled text):

- ``neighbor_gather``: the all-reduce XLA makes of the gather ``R[idx]`` over the idle 'model' axis has no argument
  as its operand. lint names the replicated neighbour table ``idx`` and prints suggest's single move for it,
  ``idx -> P(('data', 'model'))`` with the other state returned on its input's layout, checked (before: a generic
  fix, unchecked and unmarked);
- ``pair_forces``: every argument is state, split on 'data' only; SL207 names the idle 'model' axis and prints the
  state on both axes, checked (before: no finding)."""

import json
import os

import jax
from hlo_oracle import collective_bytes_per_step, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "particles_on_one_axis.py")
BOTH = P(("data", "model"))


def test_lint_names_the_cause_of_each_and_prints_fixes_xla_measures_better(cli, monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never", "-q")
    assert result.code == 0, result.err[-2000:]
    linted = {t["name"]: t for t in json.loads(result.out)["targets"]}
    _gather_all_reduce(linted)
    _idle_axis_under_state(linted)


def _all_reduces_over_model(text: str) -> list[str]:
    # replica_groups=[4,2]<=[8]: groups of the two 'model' devices of each 'data' row.
    return [line for line in text.splitlines() if " all-reduce(" in line and "replica_groups=[4,2]<=[8]" in line]


def _gather_all_reduce(linted):
    module = script_module(SCRIPT)
    before = jax.jit(module.neighbor_step).lower(*module.neighbor_arguments()).compile()
    args = module.neighbor_arguments(idx_spec=BOTH)
    state = NamedSharding(args[0].sharding.mesh, P("data"))
    after = jax.jit(module.neighbor_step, out_shardings=(state, state)).lower(*args).compile()
    assert _all_reduces_over_model(before.as_text()) and not _all_reduces_over_model(after.as_text())

    [f] = [f for f in linted["neighbor_gather"]["findings"] if f["rule"] == "SL105"]
    assert f["parameter"] == "idx" and "it comes from idx P()" in f["message"], f["message"]
    check = f["fix_check"]
    assert check is not None and check["verdict"] == "better", f["fix"]
    assert check["change"].startswith("idx: P() -> P(('data', 'model'))"), check["change"]
    assert f["fix"].startswith("shard idx as P(('data', 'model')) instead of P()"), f["fix"]
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(before), xla_peak(after))
    assert (check["traffic_bytes_before"], check["traffic_bytes_after"]) == (
        collective_bytes_per_step(before.as_text()), collective_bytes_per_step(after.as_text()))
    assert xla_peak(after) < xla_peak(before)


def _idle_axis_under_state(linted):
    module = script_module(SCRIPT)
    before = jax.jit(module.pair_step).lower(*module.pair_arguments()).compile()
    after = jax.jit(module.pair_step).lower(*module.pair_arguments(state_spec=BOTH)).compile()

    [f] = [f for f in linted["pair_forces"]["findings"] if f["rule"] == "SL207"]
    assert f["parameters"] == ["R", "V"] and "no argument is split over mesh axis 'model'" in f["message"], f["message"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    assert "R and V as P(('data', 'model')) instead of P('data') (checked: peak -" in f["fix"], f["fix"]
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(before), xla_peak(after))
    assert (check["traffic_bytes_before"], check["traffic_bytes_after"]) == (
        collective_bytes_per_step(before.as_text()), collective_bytes_per_step(after.as_text()))
    assert xla_peak(after) < xla_peak(before)
