"""A weight's gradient summed in two steps is the gradient reduction both times (issue 46, newbie19's F12 on
haliax): with the batch split over both mesh axes and the weights gathered whole, XLA sums the step's whole
gradients over 'model' in one tuple all-reduce and then that tuple's elements over 'data' in another. Read alone,
the second's operands are tuple elements, no matmul, so it was a `reshard` and an SL101 warning ("rebuilds the
whole array ... 3 values") on an ordinary data-parallel gradient sum. Both all-reduces and their operands are
read from XLA's compiled text."""

import re

import jax

from tests.conftest import lint_targets

FIXTURE = "fixtures/scripts/chained_gradient_sums.py"


def test_a_gradient_summed_over_model_then_data_is_a_gradient_reduction_twice(cli):
    import runpy

    lowered = runpy.run_path(FIXTURE)["shard_lint_targets"]()["step"]
    text = lowered.compile().as_text()
    sums = {}
    for line in text.splitlines():
        m = re.match(r"\s*%(all-reduce\.\d+) = \(([^)]*)\) all-reduce\(([^)]*)\).*?mesh\[[^\]]*\] \{'(\w+)'\}", line)
        if m:
            sums[m.group(1)] = (m.group(2), [o.strip().lstrip("%") for o in m.group(3).split(",")],
                                {"axis_0": "data", "axis_1": "model"}.get(m.group(4), m.group(4)))
    assert len(sums) == 2, sums.keys()
    (first, (shapes, _, first_axis)), (_, (_, elements, second_axis)) = sorted(
        sums.items(), key=lambda kv: "get-tuple-element" in kv[1][1][0])
    # The first sums the whole gradients (the weights' global shapes) over 'model'...
    assert first_axis == "model" and {"f32[512,2048]", "f32[2048,512]"} <= set(re.findall(r"f32\[[\d,]*\]", shapes))
    # ...and the second sums the first's elements over 'data'.
    assert second_axis == "data" and all(
        re.search(rf"%{re.escape(e)} = \S+ get-tuple-element\(%{re.escape(first)}\)", text) for e in elements)

    [target] = lint_targets(cli, FIXTURE, "--no-fix-check")
    reductions = [c for c in target["collectives"] if c["kind"] == "all-reduce"]
    assert sorted(c["mesh_axes"][0] for c in reductions) == ["data", "model"]
    assert all(c["intent"] == "gradient-reduction" for c in reductions), [(c["mesh_axes"], c["intent"])
                                                                        for c in reductions]
    assert not [f for f in target["findings"] if f["rule"] in ("SL101", "SL105") and "all-reduce" in f["message"]]
    assert jax.device_count() == 8
