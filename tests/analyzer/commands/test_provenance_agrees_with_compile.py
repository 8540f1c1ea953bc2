"""A why chain is printed only where it explains the program XLA compiled: the layout it ends at for the value
it explains is that value's compiled sharding (``jax.jit(...).lower(...).compile().output_shardings``)."""

import json
import os

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "norm_weight_layout_conflict.py")


def test_an_output_chain_propagation_does_not_reproduce_is_not_printed(cli):
    """XLA returns the norm weight's update sharded on model; our propagation gives it another layout. SL201's
    why says so instead of printing hops that end at a layout the compiled program does not have."""
    module = script_module(SCRIPT)
    lowered = module.shard_lint_targets()["step"]
    compiled = lowered.compile().output_shardings["norm"]
    mesh = compiled.mesh
    assert compiled.is_equivalent_to(NamedSharding(mesh, P("model")), 1)

    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"]
           if f["rule"] == "SL201" and f["subject"] == "result['norm']"]
    assert "(P('model'), input P())" in f["message"]
    [line] = f["provenance"]
    assert line.startswith("our sharding propagation gives this output ")
    assert line.split(", not the compiled ")[1].startswith("P('model'): it did not reproduce XLA's layout")
    assert "P('model')" not in line.split(", not the compiled ")[0]
    assert jax.device_count() == 8


VOCAB = os.path.join("fixtures", "scripts", "vocab_sharded_embedding.py")


def test_a_collective_chain_that_begins_at_another_argument_is_not_printed(cli):
    """SL105 names the vocabulary-sharded table whose gather XLA finishes with an all-reduce over model. The
    line's predicted all-reduce over model begins at the kernel params['q'] (its chain ended 'argument
    params['q'] is P('data', 'model')'), so it explains another collective: no chain of it is printed, and
    the why the compiled program shows (the gather reading the table) stays."""
    text = script_module(VOCAB).shard_lint_targets()["step"].compile().as_text()
    assert "all-reduce(" in text and "gather(" in text

    result = cli("lint", VOCAB, "--format", "json", "--fail-on", "never",
                 "--threshold", "unexplained-reshard-bytes=16KiB")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"]
           if f["rule"] == "SL105" and f["parameter"] == "params['emb']"]
    assert f["provenance"][0].startswith("the gather at ")
    began = [line for line in f["provenance"] if line.startswith("argument ")]
    assert all(line.startswith("argument params['emb'] ") for line in began), f["provenance"]
    if not began:
        assert not any(line.startswith("predicted ") for line in f["provenance"])
