"""A why chain is printed only where it explains the program XLA compiled: the layout it ends at for the value
it explains is that value's compiled sharding (``jax.jit(...).lower(...).compile().output_shardings``)."""

import json
import os
import re
from collections import Counter

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


_COLLECTIVE = re.compile(r"= (.+?) (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\("
                         r'.*op_name="([^"]*)"')


def _collectives_of(compiled, op: str) -> Counter:
    """(kind, result type) of each collective XLA compiled for an op whose name holds ``op`` (an einsum's
    spec names its line's matmul, forward and backward), read from the compiled text."""
    return Counter((kind, shape.split("{")[0]) for shape, kind, name in _COLLECTIVE.findall(compiled.as_text())
                   if op in name)


def _replicated(lowered, path: str):
    """The target compiled with the argument at ``path`` (its jax.tree key path) replicated, the rest as
    written."""
    args = lowered.args_info[0]
    compiled = lowered.compile()

    def given(key, info, sharding):
        replicate = jax.tree_util.keystr(key) == path
        spec = NamedSharding(sharding.mesh, P()) if replicate else sharding
        return jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=spec)

    abstract = jax.tree_util.tree_map_with_path(given, args, compiled.input_shardings[0])
    return compiled, abstract


def test_the_other_side_of_a_conflict_is_printed_where_its_sharding_changes_the_collective(cli, monkeypatch):
    """On the README's main example SL102 names the down-projection's weight; the line's predicted all-gather
    over fsdp begins at the tokens (their batch sharding, which the weight's sharding meets). With the fixes
    checked, that chain is printed, labelled as the other side of the conflict, because XLA compiles other
    collectives at that line when the tokens are replicated (the oracle: the compiled text's collectives at
    the line, as written and with tokens P())."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    module = script_module(os.path.join("examples", "fsdp_tp_train_step.py"))
    lowered = module.shard_lint_targets()["train_step"]
    compiled, abstract = _replicated(lowered, "[2]")
    replicated = jax.jit(module.train_step).lower(*abstract).compile()
    # Line 31's matmul: its collectives, as XLA compiles them, change with the tokens' sharding.
    assert _collectives_of(compiled, "bsf,fd->bsd") != _collectives_of(replicated, "bsf,fd->bsd")

    result = cli("lint", os.path.join("examples", "fsdp_tp_train_step.py"), "--format", "json",
                 "--fail-on", "never")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL102"]
    assert f["parameter"] == "params['layers']['down']"
    first = f["provenance"][0]
    assert first.startswith("meets tokens P('fsdp'), the other side of the conflict "), f["provenance"]
    assert f["provenance"][-1] == "argument tokens is P('fsdp', None)", f["provenance"]


def test_a_chain_from_an_argument_whose_sharding_leaves_the_collective_alone_is_not_printed(cli, monkeypatch):
    """The vocabulary-sharded table's SL105: the line's predicted all-reduce over model begins at the kernel
    params['q']. Compiled with params['q'] replicated, XLA still finishes the table's gather with the same
    all-reduce over model at that line, so with the fixes checked (the check compiled) no chain of it is
    printed, as the other side or otherwise."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    module = script_module(VOCAB)
    lowered = module.shard_lint_targets()["step"]
    compiled, abstract = _replicated(lowered, "[0]['q']")
    replicated = jax.jit(module.step).lower(*abstract).compile()
    # The table's gather (its op named gather) is finished by the same all-reduce either way.
    gathered = _collectives_of(compiled, "jvp()/gather")
    assert gathered == _collectives_of(replicated, "jvp()/gather") and gathered[("all-reduce", "f32[4,128,256]")] == 1

    result = cli("lint", VOCAB, "--format", "json", "--fail-on", "never",
                 "--threshold", "unexplained-reshard-bytes=16KiB")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"]
           if f["rule"] == "SL105" and f["parameter"] == "params['emb']"]
    assert not any(line.startswith(("meets ", "predicted ")) for line in f["provenance"]), f["provenance"]
    assert not any("params['q']" in line for line in f["provenance"]), f["provenance"]
