"""A replicated tied embedding whose transpose is the logits' decoder, with the hidden states split on 'model'
(fixtures/scripts/tied_embedding_mlm.py, issue #46 after transformers' FlaxBertForMaskedLM): XLA all-reduces the
partial sums of the whole logits. SL103 names the embedding (the decoder reads each device's slice of it, cut at
its partition-id's offset: an argument, not "no argument of the step") and compiles the embedding on the
dimension the decoder produces, its vocab (P('model')), with its Adam moments. SL201's own fix for the same
value (the layout the step returns it in, P(None, 'model')) measures worse: lint prints the better move for it,
the layout suggest's single move and its chosen version give the embedding. Figures from XLA: the compiled
programs' memory_analysis() and collectives."""

import json
import os
import re

import jax
import pytest
from hlo_oracle import collectives_per_step, step_traffic, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "tied_embedding_mlm.py")
EMBED = "params['embed']"
# The logits' per-device all-reduce: batch 16 over data=4, seq 64, vocab 8192.
LOGITS_SUM = re.compile(r"= f32\[4,64,8192\]\{[\d,]*\} all-reduce(?:-start)?\(")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _run(cli, *args):
    result = cli(*args, "--format", "json")
    assert result.code == 0, result.err
    return json.loads(result.out)["targets"][0]


def _compiled(module, embed):
    """The step with the embedding and its moments on ``embed``, returned in that layout where it moved (as
    lint's check and suggest's single move compile a move); every other output left to XLA."""
    arguments = module.arguments(embed)
    if embed == module.EMBED:
        return jax.jit(module.train_step).lower(*arguments).compile(), arguments
    pinned = NamedSharding(module.mesh(), embed)
    tree = {k: (pinned if k == "embed" else None) for k in module.shapes()}
    out = (tree, {"mu": dict(tree), "nu": dict(tree)}, None)
    return jax.jit(module.train_step, out_shardings=out).lower(*arguments).compile(), arguments


def _collectives(compiled) -> int:
    return sum(b * runs for _, b, _, runs in collectives_per_step(compiled.as_text(), 0).values())


def test_lint_moves_the_replicated_tied_embedding_to_its_vocab_as_suggest_does(cli, checking):
    lint = _run(cli, "lint", SCRIPT, "--target", "train_step", "--fail-on", "never")
    [sl103] = [f for f in lint["findings"] if f["rule"] == "SL103"]
    assert sl103["parameter"] == EMBED, sl103
    assert "sharded on the activation side: params['embed'] is replicated (P())" in sl103["message"], sl103
    assert "dimension 1 of the argument" in sl103["message"], sl103["message"]
    assert sl103["fix"].startswith("shard params['embed'] as P('model') instead of P(), 'model' on its dimension 0 "
                                   "(the one this matmul produces; it contracts dimension 1)"), sl103["fix"]
    check = sl103["fix_check"]
    assert check["verdict"] == "better" and check["change"] == (
        "params['embed'] with opt_state['mu']['embed'] and opt_state['nu']['embed'] -> P('model')"), check

    module = script_module(SCRIPT, "_tied_embedding_mlm")
    written, written_args = _compiled(module, P())
    fixed, fixed_args = _compiled(module, P("model", None))
    # XLA's figures: the logits' sum is there as written, gone with the embedding on its vocab.
    assert LOGITS_SUM.search(written.as_text()) and not LOGITS_SUM.search(fixed.as_text())
    assert check["peak_bytes_before"] == xla_peak(written) and check["peak_bytes_after"] == xla_peak(fixed)
    assert check["collective_bytes_before"] == _collectives(written)
    assert check["collective_bytes_after"] == _collectives(fixed) < _collectives(written)
    assert check["traffic_bytes_before"] == step_traffic(written, written_args[:2])
    assert check["traffic_bytes_after"] == step_traffic(fixed, fixed_args[:2])
    assert xla_peak(fixed) < xla_peak(written)

    # SL201 on the same value: its own fix (the returned layout, P(None, 'model')) measured worse than the move;
    # lint prints the move, one layout for the embedding.
    [sl201] = [f for f in lint["findings"] if f["rule"] == "SL201" and f["subject"] == "result[0]['embed']"]
    assert sl201["fix"].startswith("SL103's fix for params['embed'], measured better than the state fix for it"), \
        sl201["fix"]
    assert "shard params['embed'] as P('model') instead of P()" in sl201["fix"]
    assert "P(None, 'model'), the layout the step returns" not in sl201["fix"]
    assert sl201["fix_check"] == check
    returned, returned_args = _compiled(module, P(None, "model"))
    assert xla_peak(returned) > xla_peak(fixed) and LOGITS_SUM.search(returned.as_text())

    # suggest, the batch kept on data and the weights free on 'model': its single move and its choice give the
    # embedding the layout lint prints, with the figures lint's check measured.
    suggest = _run(cli, "suggest", SCRIPT, "--target", "train_step", "--axes", "model", "--fix", "ids",
                   "--fix", "labels")
    by_name = {v["name"]: v for v in suggest["versions"]}
    move = by_name["single move"]
    assert move["description"].startswith("params['embed']: P() -> P('model')"), move["description"]
    assert move["peak_bytes"] == xla_peak(fixed) and move["collective_bytes"] == _collectives(fixed)
    chosen = {a["path"]: a["suggested"] for a in suggest["arguments"]}
    assert chosen[EMBED] == [["model"], []], chosen
