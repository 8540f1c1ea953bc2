"""Collectives classified by intent, and rules that warn on the unintended only.
Shapes are checked against the arguments' own (global shape and PartitionSpec)."""

import os

from conftest import EXAMPLES, FIXTURES, lint_targets


def targets(cli, path, *args):
    return {t["name"]: t for t in lint_targets(cli, path, *args)}


def test_fsdp_gathers_are_parameter_gathers(cli):
    t = targets(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))["train_step"]
    gathers = [c for c in t["collectives"] if c["intent"] == "parameter-gather"]
    # params['layers']['up'] is f32[8,1024,4096] on P(None, 'fsdp', 'tp'): one layer with fsdp gathered
    # is [1024, 4096 / 2]; ['down'] f32[8,4096,1024] on P(None, 'tp', 'fsdp') gives [2048, 1024].
    shapes = {tuple(c["shape"]) for c in gathers}
    assert {(1024, 2048), (2048, 1024)} <= shapes
    assert all(c["kind"] == "all-gather" and c["mesh_axes"] == ["fsdp"] for c in gathers)
    assert {c["intent"] for c in t["collectives"]} <= {"parameter-gather", "gradient-reduction", "activation",
                                                        "reshard"}
    # No rule warns about intended traffic.
    intended = {c["hlo_name"] for c in t["collectives"] if c["intent"] != "reshard"}
    assert not [f for f in t["findings"] if f["rule"] in ("SL101", "SL102") and f["subject"] in intended]


def test_interpolation_gather_is_resharding_and_warned(cli):
    t = targets(cli, os.path.join(FIXTURES, "scripts", "sl101_relative_to_peak.py"))["sharded_on_wealth"]
    [c] = t["collectives"]
    assert c["intent"] == "reshard" and c["kind"] == "all-reduce" and c["shape"] == [8, 64, 512, 64]
    assert [f["rule"] for f in t["findings"] if f["subject"] == c["hlo_name"]] == ["SL101"]
