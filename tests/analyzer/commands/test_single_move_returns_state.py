"""A parameter move lint checks returns every state value as the step takes it: the moved ones in their new
layout, the rest on their inputs' (issue 46). The step of single_move_adam.py with no out_shardings at all:
moving w1 (and its moments) to P(None, 'model') propagates 'model' into the replicated w2 and its moments, and
left to XLA they come back on it, so the fix lint printed ("return them in that layout (out_shardings=)", w1's
only) made the next step reshard 1.5 MiB on entry. Pasted as the text says it now, with every state output
pinned, XLA returns each on its input's sharding, and the figures lint prints are XLA's of that program:
peak down, traffic up, a trade-off, not printed as the fix. The oracle is XLA: the pasted layout compiled by
JAX, its ``output_shardings``, ``memory_analysis()`` and collectives."""

import json
import os

import jax
import pytest
from hlo_oracle import step_traffic, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "single_move_adam.py")
# The all-reduce of x @ w1's partial sums is 1 MiB per device: under SL103's default minimum.
SMALL = ("--threshold", "partial-sum-min-bytes=512KiB")
MOVED = P(None, "model")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_a_move_returns_the_state_it_leaves_as_taken_and_prints_xlas_figures_of_that(cli, checking, tmp_path):
    source = open(SCRIPT).read()
    stated = "jax.jit(train_step, out_shardings=out_shardings())"
    assert stated in source
    script = tmp_path / "single_move_adam_unpinned.py"
    script.write_text(source.replace(stated, "jax.jit(train_step)"))  # every output left to XLA
    result = cli("lint", str(script), "--fail-on", "never", *SMALL, "--format", "json")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL103"]
    check = f["fix_check"]
    assert check["change"] == "params['w1'] with opt_state['mu']['w1'] and opt_state['nu']['w1'] -> P(None, 'model')"

    module = script_module(str(script))
    args = module.arguments(MOVED)
    mesh = module.mesh()
    # The premise, from XLA: the move left to XLA returns w2 and its moments on another layout than taken.
    unpinned = jax.jit(module.train_step).lower(*args).compile()
    assert not all(o.is_equivalent_to(x.sharding, len(x.shape))
                   for x, o in zip(jax.tree.leaves(args[:2]), jax.tree.leaves(unpinned.output_shardings[:2])))
    # The move as lint's text says it: w1 with its moments on P(None, 'model') and returned in it, every other
    # state output on its input's layout. XLA returns each as it takes it: the next step reshards nothing.
    state = jax.tree.map(lambda x: x.sharding, args[:2])
    pasted = jax.jit(module.train_step, out_shardings=(*state, None)).lower(*args).compile()
    for x, o in zip(jax.tree.leaves(args[:2]), jax.tree.leaves(pasted.output_shardings[:2])):
        assert o.is_equivalent_to(x.sharding, len(x.shape)), (x.sharding, o)
    assert jax.tree.leaves(pasted.output_shardings[0])[1].is_equivalent_to(NamedSharding(mesh, P()), 2)  # w2
    # lint's figures are XLA's of that program, not of the one that left w2 to XLA.
    after = (xla_peak(pasted), step_traffic(pasted, args[:2]))
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after
    assert after != (xla_peak(unpinned), step_traffic(unpinned, args[:2]))
    # Measured so, the move trades peak for traffic: not printed as the fix, and the finding says what was tried.
    assert check["peak_bytes_after"] < check["peak_bytes_before"] and \
        check["traffic_bytes_after"] > check["traffic_bytes_before"]
    assert check["verdict"] == "trade-off", check
    assert "checked:" not in f["fix"] and "was tried" in f["fix"], f["fix"]
