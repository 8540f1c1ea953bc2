"""A replicating collective whose operand no argument is (issue 46, jax-cfd's pseudospectral Navier-Stokes:
the vorticity carried through a scan and elementwise ops into each 2-D FFT) names the argument its chain
begins at, and its fix (that argument off the dimension the FFTs read) is compiled and printed only when
XLA measures it better. The oracle is XLA: both layouts of spectral_batch_on_grid_axis compiled by JAX
here, their collectives read from ``compiled.as_text()`` and their peak from ``memory_analysis()``. Which
way the check goes depends on the XLA release: jax 0.10.2's partitioner still gathers an FFT whose only
sharded dimension is its batch (so the move costs peak and saves nothing), jax 0.12's keeps it local."""

import json
import os
import re

import pytest
from ci_deps import needs
from scripts import script_targets

from jax_shard_lint.passes.common.byte_sizes import format_bytes

SCRIPT = os.path.join("fixtures", "scripts", "spectral_batch_on_grid_axis.py")
_GATHER = re.compile(r"= (\S+) all-gather\(")
_BYTES = {"c64": 8, "f32": 4}


def _xla(lowered) -> tuple[int, int]:
    """(per-device peak, all-gathered bytes in the compiled text) of one layout."""
    compiled = lowered.compile()
    m = compiled.memory_analysis()
    gathered = 0
    for shape in _GATHER.findall(compiled.as_text()):
        dtype, dims = re.match(r"(\w+)\[([\d,]*)\]", shape).groups()
        n = 1
        for d in dims.split(","):
            n *= int(d)
        gathered += _BYTES[dtype] * n
    return (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes,
            gathered)


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_the_argument_a_chain_begins_at_is_named_and_its_move_measured(cli, checking):
    targets = script_targets(SCRIPT)
    grid_peak, grid_gathered = _xla(targets["on_grid"])
    sims_peak, sims_gathered = _xla(targets["on_sims"])
    assert grid_gathered > 0  # every FFT gathers the x axis it reads

    result = cli("lint", SCRIPT, "--target", "on_grid", "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    findings = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL101"]
    # One finding for every FFT's gather (the four irfftn lines and the rfftn's, one cause), at the first line,
    # explained from the argument and naming it.
    assert [f["source"]["line"] for f in findings] == [28]
    [f] = findings
    assert f["provenance"][-1] == "argument vorticity_hat is P(None, 'sims', None)", f["provenance"]
    assert f["parameter"] == "vorticity_hat" and f["parameter_sharding"] == [[], ["sims"], []], f
    gathers = set(re.findall(r"%(all-gather[.\d]*) = ", targets["on_grid"].compile().as_text()))
    assert set(f["ops"]) == gathers, (f["ops"], gathers)  # every gather XLA compiled is in it
    check = f["fix_check"]
    assert check["peak_bytes_before"] == grid_peak
    if sims_gathered < grid_gathered and sims_peak < grid_peak:  # XLA keeps the batched FFTs local
        assert check["change"] == "vorticity_hat -> P('sims')", check
        assert check["peak_bytes_after"] == sims_peak
        assert check["verdict"] == "better", check
        assert f["fix"].startswith("shard vorticity_hat as P('sims') instead of P(None, 'sims')"), f["fix"]
        assert "checked: peak -" in f["fix"], f["fix"]
    else:  # XLA gathers them all the same: the move alone is tried and costs peak; with the FFTs under shard_map
        # on the batch it moves nothing (test_batched_fft_gather compiles that program by hand)
        assert sims_gathered == grid_gathered and sims_peak > grid_peak
        assert check["change"] == "vorticity_hat -> P('sims') with the FFTs under jax.shard_map over sims on their " \
            "batch", check
        assert check["verdict"] == "better" and check["traffic_bytes_after"] == 0, check
        assert f["fix"].startswith("run the FFTs under jax.shard_map over sims"), f["fix"]
        assert f"before it, vorticity_hat -> P('sims') was tried, compiled and costs peak +" \
               f"{format_bytes(sims_peak - grid_peak)}" in f["fix"], f["fix"]


@needs("jax_plugins.xla_cuda12", "the [gpu] extra (jax-cuda12-plugin) is not installed")
def test_a_reshard_named_by_its_chain_does_not_also_say_no_argument_reaches_it(cli):
    """jax-cfd on --platform h100: XLA's gathers there are each under SL101's share of the peak, so SL105 reports
    them. Its message said "no argument of the step is its operand" above a param: line and a why: chain ending at
    the argument it named (cfd14 F12). The message now says the value comes from that argument through the chain."""
    result = cli("lint", SCRIPT, "--platform", "h100", "--target", "on_grid", "--no-fix-check", "--format", "json",
                 "--fail-on", "never", "--threshold", "replicating-collective-peak-fraction=0.9",
                 "--threshold", "unexplained-reshard-bytes=1MiB")
    assert result.code == 0, result.err
    findings = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL105"]
    assert findings and all(f["parameter"] == "vorticity_hat" for f in findings), findings
    for f in findings:
        assert "no argument of the step" not in f["message"], f["message"]
        assert f["message"].endswith("it comes from vorticity_hat P(None, 'sims'), through the values the chain "
                                     "below carries from it"), f["message"]
        assert f["provenance"][-1] == "argument vorticity_hat is P(None, 'sims', None)", f["provenance"]
