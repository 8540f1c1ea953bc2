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
    check = f["fix_check"]  # the fix printed: suggest's FSDP version of the whole step (issue 46: one advisor)
    own = "params['w1'] with opt_state['mu']['w1'] and opt_state['nu']['w1'] -> P(None, 'model')"
    # The move's own check is said in the finding: "where the rule's own fix, <it>, was tried and measured <cost>".
    tried = f["fix"].split(f"where the rule's own fix, {own}, was tried and measured ", 1)[1]

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
    from jax_shard_lint.passes.common.byte_sizes import format_bytes

    after = (xla_peak(pasted), step_traffic(pasted, args[:2]))
    assert after != (xla_peak(unpinned), step_traffic(unpinned, args[:2]))
    as_written = module.arguments()
    written = jax.jit(module.train_step).lower(*as_written).compile()
    before = (xla_peak(written), step_traffic(written, as_written[:2]))
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == before
    assert after[0] < before[0] and after[1] > before[1]
    assert tried.startswith(f"peak -{format_bytes(before[0] - after[0])}, "), tried
    grew = format_bytes(after[1] - before[1])
    assert f"traffic +{grew} per step per device, a trade-off" in tried or f"(traffic +{grew}), a trade-off" in tried, \
        tried
    # Measured so, the move trades peak for traffic: not printed as the fix.
    assert not f["fix"].startswith("shard params['w1'] as P(None, 'model')"), f["fix"]
