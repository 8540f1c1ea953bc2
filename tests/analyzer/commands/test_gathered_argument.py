"""SL208 against XLA: two point clouds split on the same axis, the small one gathered whole for a pairwise cost
matrix (fixtures/scripts/sl208_gathered_argument.py, a Sinkhorn solve as ott-jax writes it). Each gather is far
under SL101's thresholds; the peak they are behind is what the finding is about. Both layouts are compiled here
and their peaks read from memory_analysis(): the finding's figures and its checked fix are XLA's, and a layout
whose replicated argument is not measured better has no finding."""

import json
import os

import jax
import pytest
from conftest import FIXTURES
from hlo_oracle import xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "sl208_gathered_argument.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


@pytest.fixture(scope="module")
def peaks():
    """XLA's per-device peak of the step with y split as x is, and with y replicated."""
    module = script_module(SCRIPT)
    return {name: xla_peak(jax.jit(module.sinkhorn).lower(*module.arguments(spec)).compile())
            for name, spec in (("same_axis", P("data")), ("y_replicated", P()))}


def _lint(cli, *args):
    result = cli("lint", SCRIPT, "--format", "json", "-q", "--fail-on", "never", *args)
    assert result.code == 0, result.err
    return {t["name"]: t for t in json.loads(result.out)["targets"]}


def test_small_argument_gathered_whole_is_reported_with_the_peak_its_replication_saves(cli, checking, peaks):
    # The program as XLA compiles it: y replicated holds less at the peak, by more than the 256 KiB y is whole.
    assert peaks["same_axis"] - peaks["y_replicated"] > 0.2 * peaks["same_axis"]
    targets = _lint(cli)
    (finding,) = targets["same_axis"]["findings"]
    assert finding["rule"] == "SL208" and finding["parameter"] == "y" and finding["suggested_sharding"] == [[], []]
    # Its gathers: every all-gather of y's whole array, each under SL101's thresholds.
    gathers = [c for c in targets["same_axis"]["collectives"] if c["hlo_name"] in finding["ops"]]
    assert gathers and all(c["kind"] == "all-gather" and c["bytes"] == 4096 * 16 * 4 for c in gathers)
    # The fix compiled and measured: the peaks are XLA's of the two layouts.
    check = finding["fix_check"]
    assert check["verdict"] == "better"
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (peaks["same_axis"], peaks["y_replicated"])
    assert finding["fix"].startswith("replicate y: P() instead of P('data')") and "(checked: peak -" in finding["fix"]
    assert targets["y_replicated"]["findings"] == []


_ONCE = """
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def soft_min(x, y):  # the same cost matrix, read once: nothing more is live with y split
    cost = jnp.sum(x ** 2, 1)[:, None] + jnp.sum(y ** 2, 1)[None, :] - 2 * x @ y.T
    return -0.05 * jax.nn.logsumexp(-cost / 0.05, axis=1)


def arguments(y_spec, mesh_devices=None):
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    return tuple(jax.ShapeDtypeStruct((4096, 16), jnp.float32, sharding=NamedSharding(mesh, s))
                 for s in (P("data"), y_spec))


def shard_lint_targets(mesh_devices=None):
    return {"once": jax.jit(soft_min).lower(*arguments(P("data"), mesh_devices))}
"""


def test_no_finding_where_the_replicated_argument_does_not_lower_the_peak(cli, checking, tmp_path):
    """The cost matrix read once from the gathered y: y replicated saves the gather's traffic and next to nothing
    of the peak (XLA's figures of both layouts), so there is no finding, and a line says what was measured.
    Without the fix checks nothing is measured, and the finding stands on what is read from the gathered copy."""
    script = tmp_path / "soft_min.py"
    script.write_text(_ONCE)
    module = script_module(str(script))
    written, replicated = (xla_peak(jax.jit(module.soft_min).lower(*module.arguments(spec)).compile())
                           for spec in (P("data"), P()))
    assert written - replicated < 0.25 * written
    result = cli("lint", str(script), "--format", "json", "-q", "--fail-on", "never")
    report = json.loads(result.out)["targets"][0]
    assert report["findings"] == []
    (note,) = [w for w in report["warnings"] if w.startswith("SL208 not reported: argument y")]
    assert "y -> P() was compiled and measured peak -" in note


def test_without_fix_checks_the_finding_stands_unmeasured(cli, monkeypatch, tmp_path):
    script = tmp_path / "soft_min.py"
    script.write_text(_ONCE)
    result = cli("lint", str(script), "--format", "json", "-q", "--fail-on", "never")
    (finding,) = json.loads(result.out)["targets"][0]["findings"]
    assert finding["rule"] == "SL208" and finding["fix_check"] is None
