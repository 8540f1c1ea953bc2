"""``run`` finds what lint finds on the step a script jit's: SL202 on replicated state returned undonated
(the dumped HLO names no output sharding; an output whose compiled per-device shape is the whole array is
replicated), with its fix compiled and measured against XLA's own ``memory_analysis()``; and a source finding
about the step's jit call is counted in that program's summary, as the footer counts it."""

import json
import os
import runpy

import jax
import pytest
from hlo_oracle import xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

SCRIPT = os.path.join("fixtures", "scripts", "run_undonated_step.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_run_reports_sl202_with_the_joint_donation_xla_measures(cli, checking):
    result = cli("run", SCRIPT, "--devices", "8", "--format", "json", "--only", "train_step", "--fail-on", "never")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    found = [f for f in target["findings"] if f["rule"] == "SL202"]
    # The joint donation is one change at the jit call: one finding naming both arguments (issue 46).
    [joint] = found
    assert joint["subject"] == "params" and "argument 1 (opt_state) is not donated" in joint["message"], joint

    module = runpy.run_path(SCRIPT)  # not as __main__: its definitions only
    mesh = module["mesh"]
    replicated = NamedSharding(mesh, P())
    w = jax.ShapeDtypeStruct((1024, 1024), jax.numpy.float32, sharding=replicated)
    params, opt_state = {"w1": w, "w2": w}, {"m": {"w1": w, "w2": w}}
    x = jax.ShapeDtypeStruct((64, 1024), jax.numpy.float32, sharding=NamedSharding(mesh, P("data")))
    peak = {d: xla_peak(jax.jit(module["train_step"], donate_argnums=d).lower(params, opt_state, x).compile())
            for d in [(), (0, 1)]}
    assert peak[(0, 1)] < peak[()]
    for f in found:
        assert f["fix"].startswith("jax.jit(..., donate_argnums=(0, 1)) (checked: peak -"), f["fix"]
        assert (f["fix_check"]["peak_bytes_before"], f["fix_check"]["peak_bytes_after"]) == (peak[()], peak[(0, 1)])


def test_run_counts_a_source_finding_on_the_jit_call_in_that_programs_summary(cli):
    result = cli("run", SCRIPT, "--devices", "8", "--only", "train_step", "--fail-on", "never")
    summary = [line for line in result.out.splitlines() if line.startswith("findings ")]
    footer = [line for line in result.out.splitlines() if line.startswith("1 target(s), ")]
    # Two SL202s, SL403 on the jit call, and SL207: the batch on 'data' leaves 'model' idle (its devices repeat
    # each other's work).
    assert footer == ["1 target(s), 4 finding(s)"], result.out
    assert summary and summary[0].split()[1:3] == ["4", "warning"], summary
    assert "SL403 from the script's source" in summary[0]
