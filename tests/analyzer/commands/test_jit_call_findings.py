"""SL202 and SL201 on a stated out_shardings are about the jit call's options: their source is the
``jax.jit(...)`` line where donate_argnums and out_shardings are written, not the ``.lower(*args)`` line the
program's locations name (newcomer13's BERT: bert_mlm_step.py:89, not :97), which stays as their via. The lines
are read from the fixture's own text; the options from what JAX lowered."""

import json
import os

import jax
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "jit_apart_from_lower.py")


def _line(text: str) -> int:
    with open(SCRIPT) as f:
        [n] = [i for i, line in enumerate(f, 1) if text in line]
    return n


def test_jit_option_findings_are_at_the_jit_call_the_lowering_line_their_via(cli):
    result = cli("lint", SCRIPT, "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    targets = {t["name"]: t for t in json.loads(result.out)["targets"]}
    lowered = _line("jitted.lower(*args)")
    # What JAX lowered: the plain layout donates nothing; the stated one donates its state.
    module = script_module(SCRIPT)
    programs = module.shard_lint_targets(jax.devices()[:8])
    assert not _donates(programs["plain"]) and _donates(programs["stated"])

    [donation] = [f for f in targets["plain"]["findings"] if f["rule"] == "SL202"]
    assert donation["source"]["line"] == _line("jitted = jax.jit(step)") != lowered
    assert donation["via"]["line"] == lowered
    [stated] = [f for f in targets["stated"]["findings"] if f["rule"] == "SL201"]
    assert "out_shardings states" in stated["message"]
    assert stated["source"]["line"] == _line("jitted = jax.jit(step, out_shardings=")
    assert stated["via"]["line"] == lowered


def _donates(lowered) -> bool:
    """Whether the jitted function was given any argument to donate (JAX's args_info)."""
    return any(arg.donated for arg in jax.tree.leaves(lowered.args_info))
