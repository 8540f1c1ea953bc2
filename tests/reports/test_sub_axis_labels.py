"""A Shardy sub-axis label (``data:(2)2``: the part of data of size 2 whose pre-size is 2, its minor half)
is said in words wherever a table or a gate row names a collective's axes (newcomer12's gate table read
"all-to-all over data:(2)2"); whole axes keep their names. The words' meaning is the device groups XLA
writes for that sub-axis, parsed the way the collectives' axes are."""

from __future__ import annotations

from report_samples import render_terminal, render_text

from jax_shard_lint.passes.common.axes import axes_text
from jax_shard_lint.passes.common.device_groups import MeshInfo, axes_of_groups
from jax_shard_lint.passes.compare.gate import compare
from jax_shard_lint.passes.models.gate import Baseline, BaselineTarget, CollectiveSummary, GateThresholds

MESH = {"data": 4, "model": 2}
MiB = 1 << 20


def test_a_sub_axis_is_the_device_groups_its_words_say():
    mesh = MeshInfo((("data", 4), ("model", 2)))  # device d * 2 + m
    # Pairs of data devices next to each other (data 0-1 and 2-3, model fixed): ids 0,2 | 1,3 | 4,6 | 5,7.
    assert axes_of_groups([[0, 2], [1, 3], [4, 6], [5, 7]], mesh) == ["data:(2)2"]
    assert axes_text(["data:(2)2"], MESH) == "pairs of data devices next to each other"
    # Data 0 and 2, 1 and 3: two apart.
    assert axes_of_groups([[0, 4], [1, 5], [2, 6], [3, 7]], mesh) == ["data:(1)2"]
    assert axes_text(["data:(1)2", "model"], MESH) == "model and pairs of data devices 2 apart"
    assert axes_text(["data", "model"], MESH) == "data,model"
    assert axes_text(["data", "model"], MESH, ", ") == "data, model"


def _target(collectives: list[CollectiveSummary]) -> BaselineTarget:
    by_kind: dict[str, int] = {}
    for c in collectives:
        key = f"{c.kind} over {','.join(c.mesh_axes)}"  # the baseline's key, as stored
        by_kind[key] = by_kind.get(key, 0) + c.bytes_per_step
    return BaselineTarget(platform="cpu", num_devices=8, mesh=MESH, peak_bytes=100 * MiB, temp_bytes=0,
                          argument_bytes=0, output_bytes=0, alias_bytes=0,
                          collective_bytes=sum(c.bytes_per_step for c in collectives), bytes_by_kind=by_kind,
                          collectives=collectives, errors=[])


def test_gate_rows_say_a_sub_axis_in_words():
    reduce = CollectiveSummary(kind="all-reduce", mesh_axes=["model"], shape=[256], dtype="f32",
                               bytes_per_step=MiB, count=1, source="vit_step.py:40")
    to_all = CollectiveSummary(kind="all-to-all", mesh_axes=["data:(2)2"], shape=[16, 8, 8, 256], dtype="f32",
                               bytes_per_step=2 * MiB, count=1, source="vit_step.py:56")
    baseline = Baseline(tool_version="0", jax_version="0", jaxlib_version="0", targets={"good_step": _target([reduce])})
    result = compare(baseline, {"good_step": _target([reduce, to_all])}, GateThresholds(), "snap/baseline.json")
    metrics = [r.metric.strip() for r in result.rows]
    assert "all-to-all over pairs of data devices next to each other" in metrics
    assert "new all-to-all f32[16, 8, 8, 256] over pairs of data devices next to each other" in metrics
    for text in (render_text("gate", "markdown", result), render_terminal("gate", result, width=200)):
        flat = " ".join(text.split())
        assert ":(" not in flat, flat
        assert "all-to-all over pairs of data devices next to each other" in flat, flat


def test_lint_collectives_tables_say_a_sub_axis_in_words():
    from test_findings_reports import report

    lint = report()
    [target] = lint.targets
    to_all = target.collectives[0].model_copy(update={"kind": "all-to-all", "mesh_axes": ["data:(2)2"]})
    lint = lint.model_copy(update={"targets": [target.model_copy(update={"collectives": [to_all]})]})
    for text in (render_terminal("lint", lint, width=250), render_text("lint", "html", lint)):
        flat = " ".join(text.split())
        assert "data:(2)2" not in flat
        assert "pairs of data devices next to each other" in flat


def test_propagate_tables_say_a_sub_axis_in_words():
    from test_propagate_reports import run

    shown = run()
    [target] = shown.targets
    partial = target.predicted[0].model_copy(update={"mesh_axes": ["data:(1)2"]})
    shown = shown.model_copy(update={"targets": [target.model_copy(update={"predicted": [partial]})]})
    for text in (render_terminal("propagate", shown), render_text("propagate", "markdown", shown),
                 render_text("propagate", "html", shown)):
        flat = " ".join(text.split())
        assert "data:(1)2" not in flat
        assert "pairs of data devices 2 apart" in flat, flat
