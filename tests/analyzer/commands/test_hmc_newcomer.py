"""A newcomer's blackjax program (fixtures/scripts/hmc_logistic_chains.py, HMC chains vmapped over a logistic
regression's dataset), and what they could not act on in its report (issue 46, polish18), each judged by XLA's
compiled program of the same target."""

from __future__ import annotations

import json
import os
import re

import jax
import pytest
from hlo_oracle import collective_bytes_per_step, xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module, script_targets

SCRIPT = os.path.join("fixtures", "scripts", "hmc_logistic_chains.py")
ROWS, CHAINS = 262144, 256
MESH = {"chains": 4, "data": 2}


@pytest.fixture(scope="module")
def compiled_text():
    """Each target's compiled HLO text, as XLA compiles the script's own lowering."""
    return {name: lowered.compile().as_text() for name, lowered in script_targets(SCRIPT).items()}


def _target(cli, name, *args):
    result = cli("lint", SCRIPT, "--target", name, "--format", "json", "-q", "--fail-on", "never", *args)
    assert result.code == 0, result.err[-2000:]
    [target] = json.loads(result.out)["targets"]
    return target


def _dims_split_by(shape_text: str, global_shape: tuple[int, ...], size: int) -> list[int]:
    local = [int(n) for n in shape_text.split(",")]
    return [d for d, (g, n) in enumerate(zip(global_shape, local)) if g == n * size]


def test_the_gather_of_the_features_names_the_logits_dimension_the_chains_split(cli, compiled_text):
    # XLA's compiled logits (the forward dot of the logits line, X @ beta under vmap: f32[rows, chains]): the
    # 'chains' axis splits its second dimension, the chains, on every device: its columns, not its rows.
    dots = re.findall(r"= f32\[(\d+,\d+)\]\{[^}]*\} dot\([^\n]*op_name=\"[^\"]*/jvp\(\)/dot_general\"",
                      compiled_text["x_features_on_chains"])
    assert dots
    assert {tuple(_dims_split_by(s, (ROWS, CHAINS), MESH["chains"])) for s in dots} == {(1,)}
    [finding] = [f for f in _target(cli, "x_features_on_chains")["findings"] if f["rule"] == "SL105"]
    # The predicted gather's why (jax 0.10.2's; jax 0.12's finding explains the gather by XLA's alone).
    whys = [w for w in finding["provenance"] if "another operand splits" in w]
    assert len(whys) == (jax.__version__.startswith("0.10")), finding["provenance"]
    assert all("an axis another operand splits the result's columns on" in w for w in whys)


def test_check_lists_a_snapshots_targets_in_the_scripts_order_as_lint_does(cli, tmp_path):
    # The script's own order (its shard_lint_targets dict), which is not the names' alphabetical one.
    written = list(script_targets(SCRIPT))
    assert written != sorted(written)
    linted = cli("lint", SCRIPT, "--format", "json", "-q", "--fail-on", "never")
    assert [t["name"] for t in json.loads(linted.out)["targets"]] == written
    out = str(tmp_path / "snap")
    assert cli("snapshot", SCRIPT, "-o", out, "-q").code == 0
    checked = cli("check", out, "--format", "json", "-q", "--fail-on", "never")
    assert checked.code == 0, checked.err[-2000:]
    assert [t["name"] for t in json.loads(checked.out)["targets"]] == written


def test_the_copies_of_the_gathered_dataset_at_the_peak_name_what_they_copy(cli, compiled_text):
    # XLA's compiled program: each wrapped_copy fusion at the peak copies one all-gather of X (its features
    # gathered over 'chains' for the logits' dot and for its transpose): no metadata of its own, the all-gather's
    # op is the logits line's dot_general.
    text = compiled_text["x_features_on_chains"]
    copies = dict(re.findall(r"%(wrapped_copy[\w.]*) = f32\[131072,64\]\S* fusion\(%(all-gather[\w.]*)\)", text))
    # jax 0.12's partitioner leaves the all-gathers without metadata: they gather X's parameter (through a copy
    # named after it), and the argument names them.
    assert len(copies) == 2
    line = 1 + open(SCRIPT).read().splitlines().index("    logits = X @ beta")
    live = {b["name"]: b for b in _target(cli, "x_features_on_chains")["memory"]["live_at_peak"]}
    assert set(copies) <= set(live)
    for name, gather in copies.items():
        assert live[name]["bytes"] == 131072 * 64 * 4
        gathered = re.search(rf"%{re.escape(gather)} = [^\n]*all-gather\(%([\w.]+)\)[^\n]*", text)
        assert gathered
        if re.search(r"op_name=\"[^\"]*/dot_general\"", gathered.group(0)):
            assert live[name]["copy_of"] == gather
            assert (os.path.basename(live[name]["source"]["file"]), live[name]["source"]["line"]) == (
                os.path.basename(SCRIPT), line)
        else:
            assert re.search(rf"%{re.escape(gathered.group(1))} = [^\n]*\(%param[\w.]*\)[^\n]*op_name=\"X\"", text)
            assert (live[name]["copy_of"], live[name]["source"]) == (f"{gather} of argument X", None)


def test_sl203s_fix_names_no_out_shardings_that_change_nothing_and_its_figures_are_the_printed_programs(
        cli, monkeypatch):
    # The printed fix, as a user writes it: X sharded as the finding says, the step jitted as before (no
    # out_shardings: the chain state comes back on P('chains') as it goes in, pinned or not). XLA's compile of
    # that program gives the figures the check printed.
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    [finding] = [f for f in _target(cli, "x_replicated")["findings"] if f["rule"] == "SL203"]
    assert finding["fix_check"]["verdict"] == "better"
    assert finding["suggested_sharding"] == [["chains", "data"], []]
    assert "out_shardings" not in finding["fix"] and "other state output" not in finding["fix"]
    assert finding["fix"].startswith("shard X as P(('chains', 'data')) (checked: ")
    module = script_module(SCRIPT)
    shapes = module.arguments(P(("chains", "data")), P(), mesh_devices=jax.devices()[:8])
    compiled = jax.jit(module.step).lower(*shapes).compile()
    returned = jax.tree.leaves(compiled.output_shardings)[:3]
    assert all(out.is_equivalent_to(x.sharding, len(x.shape)) for out, x in zip(returned, shapes[:3]))
    check = finding["fix_check"]
    assert check["peak_bytes_after"] == xla_peak(compiled)
    assert check["collective_bytes_after"] == check["traffic_bytes_after"] == collective_bytes_per_step(
        compiled.as_text())
