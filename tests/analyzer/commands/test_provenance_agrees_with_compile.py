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
