"""SL207 on a vmapped batch of problems (issue 46, newbie18 F1: ott-jax's Sinkhorn vmapped over 8 problems, every
argument replicated on the mesh, lint said "findings none" while every device computed all 8). The finding's fix
splits the dimension the step's matmuls batch over (0 as vmap stacks them, 1 under ``in_axes=1``) over every mesh
axis; its printed figures are XLA's of that layout, made the way a user writes it (tests/fix_oracle.py) and
compiled here, and better than the step as written. A single problem has no batch: no finding."""

import json
import os

from conftest import FIXTURES
from fix_oracle import better, fixed, measured
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "sl207_idle_mesh_axis_vmapped.py")


# target: (its step, the stacking of its problems, xs's and ys's written layouts, the change the fix prints)
CASES = {"replicated": ("batched", "stacked", (P(), P()), "xs, ys -> P(('data', 'model'))"),
         "points_major": ("points_major", "interleaved", (P("data"), P()), "xs, ys -> P(None, ('data', 'model'))")}


def test_the_batch_on_every_axis_is_printed_with_xlas_figures_and_a_single_problem_is_silent(cli, monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never", "-q")
    assert result.code == 0, result.err[-2000:]
    targets = json.loads(result.out)["targets"]
    findings = {t["name"]: [f for f in t["findings"] if f["rule"] == "SL207"] for t in targets}
    assert findings["single_problem"] == []  # one problem: no dimension of the step's matmuls batches, no fix
    module = script_module(SCRIPT)
    shapes = {"stacked": (module.BATCH, module.POINTS, module.FEATURES),
              "interleaved": (module.POINTS, module.BATCH, module.FEATURES)}
    for target, (step, shape, written, change) in CASES.items():
        fn, args = getattr(module, step), module.arguments(shapes[shape], *written)
        compiled, as_written = measured(fn, {}, args, 0)
        after = fixed(change, fn, {}, args, 0, compiled)  # the printed layout, written into the step by hand
        [f] = findings[target]
        check = f["fix_check"]
        assert f["parameters"] == ["xs", "ys"] and check["change"] == change, (target, f["parameters"], check)
        assert check["verdict"] == "better", f["fix"]
        assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written, target
        assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after, target
        assert better(as_written, after), (target, as_written, after)
        assert "(checked: peak -" in f["fix"], f["fix"]
