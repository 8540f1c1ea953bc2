"""Fixes lint prints on steps written with model libraries are compiled and measured better, and move the
optimizer state with the parameter as a person would, wherever the library keeps it. The oracle is XLA: the
step written with the fix in Python is compiled here (memory_analysis()'s peak, the collectives in its
compiled text and the state the next step reshards on entry)."""

import json
import os

import pytest
from ci_deps import require
from conftest import EXAMPLES
from hlo_oracle import step_traffic, xla_peak
from scripts import script_module

NNX = os.path.join(EXAMPLES, "models", "nnx_transformer.py")
EMBEDDING = "['embed']['embedding'].value"


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_an_nnx_split_states_embedding_moves_with_its_moments(cli, checking):
    """nnx.split((model, optimizer)) makes one argument of both: the embedding is state[0]['embed'][...] and
    its AdamW moments state[1]['opt_state'][0]['mu'|'nu']['embed'][...]. Sharded on d_model, the tied logits
    all-reduce (SL103); its fix, the embedding on its vocabulary, is compiled with the moments moved too (before:
    the embedding alone, measured worse, traffic +14.0 MiB, and not offered). The step with the embedding and
    its moments on the vocabulary is the script's own embed_on="vocab" layout, compiled here."""
    require("flax", "flax is not installed (the [test] extra)")
    require("optax", "optax is not installed (the [test] extra)")
    # The donation (SL202) and its three compiles are not this test's: the other findings are the same without it.
    result = cli("lint", NNX, "--set", "embed_on=d_model", "--ignore", "SL202", "--format", "json", "-q",
                 "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    [t] = json.loads(result.out)["targets"]
    [f] = [f for t in [t] for f in t["findings"] if f["rule"] == "SL103" and "embed" in (f["parameter"] or "")]
    check = f["fix_check"]
    assert check["verdict"] == "better" and "checked:" in f["fix"]
    for moment in ("mu", "nu"):
        path = f"state[1]['opt_state'][0]['{moment}']{EMBEDDING}"
        assert path in check["change"] and path in f["fix"]
    module = script_module(NNX)

    def xla(embed_on):
        _, _, (_, state, _) = module.step_and_inputs(embed_on=embed_on)
        compiled = module.shard_lint_targets(embed_on=embed_on)["train_step"].compile()
        return xla_peak(compiled), step_traffic(compiled, (state,))

    written, fixed = xla("d_model"), xla("vocab")
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == fixed
    assert fixed[0] < written[0] and fixed[1] < written[1]
