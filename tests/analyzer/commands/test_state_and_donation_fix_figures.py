"""The figures a state fix (SL201/SL203) and a donation fix (SL202) print are what the change they name
compiles to. The oracle is JAX: the change made the way a user makes it (the arguments given the layouts,
``jax.jit(..., donate_argnums=)``), compiled by ``jax.jit(...).lower(...).compile()``, and XLA's
``memory_analysis()`` of that program (fixtures/scripts/state_fix_figures.py)."""

import json
import os

import jax
import pytest
from hlo_oracle import xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.passes.models.report import LintReport
from jax_shard_lint.reports.findings.sarif import render_sarif

SCRIPT = os.path.join("fixtures", "scripts", "state_fix_figures.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


@pytest.fixture(scope="module")
def lowered():
    module = script_module(SCRIPT)
    step = module.shard_lint_targets()["step"]
    abstract = jax.tree.map(lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
                            step.args_info[0], step.compile().input_shardings[0])
    return module, abstract


def _findings(cli, rule):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    return [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == rule]


def _resharded(params, **layouts):
    mesh = params["w"].sharding.mesh
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, layouts[k])) if k in layouts
            else v for k, v in params.items()}


def test_the_state_fix_figure_is_printed_once_for_every_value_it_changes(cli, checking, lowered):
    """Both state values that come back on another layout were given their returned layouts in one compile:
    its figure is printed once, said to be for both together, and is XLA's peak of that program, not of the
    bias's change alone (which a user applying that finding's fix by itself would measure)."""
    module, (params, x) = lowered
    found = _findings(cli, "SL201")
    assert len(found) == 2
    with_figures = [f for f in found if "peak " in f["fix"]]
    assert len(with_figures) == 1, [f["fix"] for f in found]
    assert all("all 2 state values" in f["fix"] for f in found)
    [bias] = [f for f in found if f["subject"] == "result[0]['b']"]
    assert bias["fix"].startswith("shard params['b'] as P('model')"), bias["fix"]
    check = with_figures[0]["fix_check"]

    as_written = jax.jit(module.step).lower(params, x).compile()
    both = jax.jit(module.step).lower(_resharded(params, emb=P(None, "model"), b=P("model")), x).compile()
    bias_alone = jax.jit(module.step).lower(_resharded(params, b=P("model")), x).compile()
    assert check["peak_bytes_before"] == xla_peak(as_written)
    assert check["peak_bytes_after"] == xla_peak(both) < xla_peak(as_written)
    assert xla_peak(bias_alone) != xla_peak(both)


def test_the_donation_fix_prints_what_donating_compiles_to(cli, checking, lowered):
    """SL202 names the argument's matching bytes as an upper bound, and its fix is compiled: the peak it
    prints is XLA's with ``donate_argnums=(0,)``, which here falls by less than those bytes."""
    module, (params, x) = lowered
    [f] = _findings(cli, "SL202")
    assert "up to 4.0 MiB per device" in f["message"], f["message"]
    check = f["fix_check"]
    assert check is not None and check["verdict"] == "better"
    as_written = jax.jit(module.step).lower(params, x).compile()
    donated = jax.jit(module.step, donate_argnums=(0,)).lower(params, x).compile()
    assert check["peak_bytes_before"] == xla_peak(as_written)
    assert check["peak_bytes_after"] == xla_peak(donated)
    saved = xla_peak(as_written) - xla_peak(donated)
    assert 0 < saved < 4 * 2**20
    assert f["fix"] == f"jax.jit(..., donate_argnums=(0,)) (checked: peak -{saved / 2**20:.1f} MiB, traffic ±0 B " \
        "per step per device)"
    # Its source is the line the user adds donate_argnums at (the jax.jit(step).lower(...) call), not
    # where the step first reads params; that first use is named in the message (issue 46).
    with open(SCRIPT) as fh:
        lines = fh.read().splitlines()
    assert "jax.jit(step)" in lines[f["source"]["line"] - 1]
    first_use = int(f["message"].rsplit("params is first used at line ", 1)[1])
    assert "params" in lines[first_use - 1] and "jax.jit" not in lines[first_use - 1]


JOINT = os.path.join("fixtures", "scripts", "joint_donation_adam.py")


def test_several_arguments_to_donate_get_one_fix_the_joint_donation_measured_by_xla(cli, checking):
    """SL202 names the parameters and the optimizer state of an Adam step: donating both in one jit is a
    candidate of its own (XLA's peak with donate_argnums=(0, 1) is lower than with either alone), and one
    finding names both arguments and prints that one fix with XLA's figure for it: one change at one line is
    one finding in the terminal and JSON, and one result in SARIF (a new user's ViT, issue 46)."""
    result = cli("lint", JOINT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL202"]
    assert f["subject"] == "params"
    assert f["message"].startswith("argument 0 (params) is not donated"), f["message"]
    assert "; and argument 1 (opt_state) is not donated" in f["message"], f["message"]

    module = script_module(JOINT)
    step = module.shard_lint_targets()["step"]
    args = jax.tree.map(lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
                        step.args_info[0], step.compile().input_shardings[0])
    peak = {d: xla_peak(jax.jit(module.step, donate_argnums=d).lower(*args).compile())
            for d in [(), (0,), (1,), (0, 1)]}
    assert peak[(0, 1)] < min(peak[(0,)], peak[(1,)]) < peak[()]
    saved = peak[()] - peak[(0, 1)]
    assert f["fix_check"]["peak_bytes_before"] == peak[()]
    assert f["fix_check"]["peak_bytes_after"] == peak[(0, 1)]
    assert f["fix"] == f"jax.jit(..., donate_argnums=(0, 1)) (checked: peak -{saved / 2**20:.1f} MiB, " \
        "traffic ±0 B per step per device for params and opt_state together)"
    sarif = json.loads(render_sarif(LintReport.model_validate(report)))
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]].count("SL202") == 1
