"""check on a snapshot gives the finding lint gives on the script, word for word: SL201's "why" hops
(the propagation behind it) included, which check left out (issue 46). The figure both print is the
per-device size of the output in XLA's compiled program."""

import json
import os

from conftest import FIXTURES
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "sl201_output_sharding_mismatch.py")


def test_check_on_a_snapshot_prints_lints_sl201_with_its_why(cli, tmp_path):
    linted = cli("lint", SCRIPT, "--target", "unpinned", "--no-fix-check", "--format", "json", "--fail-on", "never")
    assert linted.code == 0, linted.err
    snap = cli("snapshot", SCRIPT, "--target", "unpinned", "-o", str(tmp_path / "snap"))
    assert snap.code == 0, snap.err
    checked = cli("check", str(tmp_path / "snap" / "unpinned.mlir"), "--no-fix-check", "--format", "json",
                  "--fail-on", "never")
    assert checked.code == 0, checked.err
    [lint_f] = [f for f in json.loads(linted.out)["targets"][0]["findings"] if f["rule"] == "SL201"]
    [check_f] = [f for f in json.loads(checked.out)["targets"][0]["findings"] if f["rule"] == "SL201"]
    assert lint_f["provenance"], "lint explains SL201"
    for key in ("message", "source", "via", "provenance", "subject", "bytes", "fix"):
        assert check_f[key] == lint_f[key], key
    compiled = script_module(SCRIPT).shard_lint_targets()["unpinned"].compile()
    w_out = compiled.output_shardings[0]["w"]
    per_device = 4 * int.__mul__(*w_out.shard_shape((512, 512)))
    assert check_f["bytes"] == per_device


MAIN = os.path.join("examples", "fsdp_tp_train_step.py")


def test_check_prints_the_other_side_of_a_conflict_where_lint_does(cli, tmp_path, monkeypatch):
    """With the fixes checked, lint prints a why chain from another argument than the one a finding names (the
    tokens, meeting SL102's down-projection weight), checked by compiling the program with that argument
    replicated (conflict_checks.py); check on the snapshot runs the same check on the snapshot's StableHLO (no
    Python run) and prints the same findings, chains and checked fixes included."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    linted = cli("lint", MAIN, "--format", "json", "--fail-on", "never")
    assert linted.code == 0, linted.err
    snap = cli("snapshot", MAIN, "-o", str(tmp_path / "snap"))
    assert snap.code == 0, snap.err
    checked = cli("check", str(tmp_path / "snap" / "train_step.mlir"), "--format", "json", "--fail-on", "never")
    assert checked.code == 0, checked.err
    lint_fs = json.loads(linted.out)["targets"][0]["findings"]
    check_fs = json.loads(checked.out)["targets"][0]["findings"]
    [sl102] = [f for f in check_fs if f["rule"] == "SL102"]
    assert sl102["provenance"][0].startswith("meets tokens P('fsdp'), the other side of the conflict "), sl102
    assert [f["rule"] for f in check_fs] == [f["rule"] for f in lint_fs]
    for lint_f, check_f in zip(lint_fs, check_fs):
        for key in ("message", "source", "via", "provenance", "subject", "bytes", "fix", "fix_check"):
            assert check_f.get(key) == lint_f.get(key), (lint_f["rule"], key)
