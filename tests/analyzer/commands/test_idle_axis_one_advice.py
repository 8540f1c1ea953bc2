"""One advisor for an idle mesh axis (issue 46): on a blackjax-style HMC sampler whose chains are replicated on a
chains=4 x data=2 mesh (fixtures/scripts/idle_chains_hmc.py), lint's SL207 fix and suggest's choice are one
layout of the same values: lint's idle-axis fix stage compiles suggest's candidates (its solver's layout, its
single moves of the batch) beside the batch on every axis and keeps the one suggest's rule keeps, and suggest
ranks the batch on every axis among its single moves. The chosen layout's figures are XLA's: the fixture lowered
with it, as a user pastes it, compiled by ``jax.jit(...).lower(...).compile()``."""

import json
import os
import re

import jax
import pytest
from hlo_oracle import collective_bytes_per_step, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P  # noqa: F401  (the specs the fix prints are read with it)
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "idle_chains_hmc.py")
# "positions, momenta -> P(('chains', 'data')), X, y -> P()": each group of arguments and the spec it gets.
GROUP = re.compile(r"((?:\w+, )*\w+) -> (P\((?:[^()]|\([^()]*\))*\))")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _spec(sharding):
    """A PartitionSpec (or the JSON's per-dimension axis lists) as one PartitionSpec, trailing Nones dropped."""
    axes_of = [[] if d is None else [d] if isinstance(d, str) else list(d) for d in sharding]
    parts = [None if not axes else axes[0] if len(axes) == 1 else tuple(axes) for axes in axes_of]
    while parts and parts[-1] is None:
        parts.pop()
    return P(*parts)


def test_lint_prints_the_layout_suggest_chooses_and_xla_measures_it(cli, checking):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never", "-q")
    assert result.code == 0, result.err[-2000:]
    [t] = json.loads(result.out)["targets"]
    [f] = [f for f in t["findings"] if f["rule"] == "SL207"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    lint = {name: _spec(eval(spec)) for names, spec in GROUP.findall(check["change"]) for name in names.split(", ")}
    assert lint, check["change"]

    result = cli("suggest", SCRIPT, "--format", "json")
    assert result.code == 0, result.err[-2000:]
    [s] = json.loads(result.out)["targets"]
    suggested = {a["path"]: _spec(a["suggested"]) for a in s["arguments"]}
    written = {a["path"]: _spec(a["current"]) for a in s["arguments"]}
    # The same layout for every value: what lint moves as suggest moves it, the rest as written in both.
    assert {**written, **lint} == suggested, (check["change"], s["chosen"])

    module = script_module(SCRIPT)
    mesh = module.mesh()
    before = jax.jit(module.step).lower(*module.arguments()).compile()
    # The state (the positions, returned) comes back on its new layout, as lint's check and suggest pin it.
    after = jax.jit(module.step, out_shardings=NamedSharding(mesh, suggested["positions"])).lower(
        *module.arguments(lint)).compile()
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(before), xla_peak(after))
    assert (check["traffic_bytes_before"], check["traffic_bytes_after"]) == (
        collective_bytes_per_step(before.as_text()), collective_bytes_per_step(after.as_text()))
    assert xla_peak(after) < xla_peak(before)
