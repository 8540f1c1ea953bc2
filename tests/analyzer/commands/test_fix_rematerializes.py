"""A fix XLA compiles with an involuntary full rematerialization the program as written does not have is
never printed as better on its peak and traffic alone (issue 46: SL103's fix on a Llama). The oracle is XLA:
each layout compiled by JAX in a process of its own, its stderr read for the partitioner's warning and its
memory_analysis() for the peak."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = os.path.join("fixtures", "scripts", "fix_that_rematerializes.py")
MARKER = "Involuntary full rematerialization"
_COMPILE = """
import sys
sys.path.insert(0, "tests")
from jax.sharding import PartitionSpec as P
from scripts import script_module
targets = script_module({script!r}).shard_lint_targets(h_spec={h}, embed_spec={embed})
m = targets["sequence_parallel_logits"].compile().memory_analysis()
print(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)
"""


def _xla(h: str, embed: str) -> tuple[int, bool]:
    """XLA's peak for the fixture compiled with these argument shardings, and whether its partitioner
    warned that it rematerializes a value."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    done = subprocess.run([sys.executable, "-c", _COMPILE.format(script=SCRIPT, h=h, embed=embed)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1]), MARKER in done.stderr


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _finding(cli):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL103"]
    return f


def test_a_fix_xla_rematerializes_ranks_below_one_it_does_not(cli, checking):
    """SL103's own fix (the embedding on the vocabulary) compiles to less traffic and a lower peak, but XLA
    replicates the hidden state to compile it, which the program as written does not make it do: it is not
    the printed fix. The finding says it was tried and that XLA rematerializes with it, and prints the layout
    found next (suggest's, for the same arguments), which XLA compiles without the warning, to the peak the
    check reports."""
    written_peak, written_warned = _xla("P('data', None, 'model')", "P(None, 'model')")
    own_peak, own_warned = _xla("P('data', None, 'model')", "P('model', None)")
    assert own_warned and not written_warned
    assert own_peak < written_peak  # measured better on its figures alone

    f = _finding(cli)
    assert "embed -> P('model'), was tried and measured peak" in f["fix"], f["fix"]
    assert "but XLA rematerializes with it" in f["fix"] and "(argument h)" in f["fix"], f["fix"]
    check = f["fix_check"]
    assert check["verdict"] == "better" and check["rematerialized"] == [], check
    assert check["change"].endswith("(solver)"), check
    assert check["peak_bytes_before"] == written_peak
    # The printed layout, compiled by XLA: no rematerialization, the peak the check reports.
    specs = dict(part.split(" -> ") for part in re.split(r", (?=\w+ -> )", check["change"].removesuffix(" (solver)")))
    peak, warned = _xla(specs.get("h", "P('data', None, 'model')"), specs.get("embed", "P(None, 'model')"))
    assert not warned and peak == check["peak_bytes_after"] < written_peak


def test_where_it_is_the_only_candidate_the_finding_says_xla_rematerializes_with_it(cli, checking, monkeypatch):
    """Without suggest's layout to fall back on (its solver fixes turned off), the rule's fix is the only
    candidate: it is not printed as the fix, and the finding says what was tried, what it measured and that
    XLA rematerializes with it (SL104's words), with no sharding shown as the one to give."""
    from jax_shard_lint.analyzer.backend.advice import solver_fixes

    monkeypatch.setattr(solver_fixes, "MAX_SOLVER_FIXES", 0)
    f = _finding(cli)
    check = f["fix_check"]
    assert check["verdict"] == "rematerializes" and check["change"] == "embed -> P('model')", check
    [remat] = check["rematerialized"]
    assert remat.startswith("XLA cannot reshard f32[8,128,256] (argument h) from P('data', None, 'model')"), remat
    assert f["fix"].startswith("no sharding change found that helps: embed -> P('model') was tried, compiled and "
                               "measured peak -"), f["fix"]
    assert "but XLA rematerializes with it" in f["fix"] and "so it is not offered" in f["fix"], f["fix"]
    assert f["suggested_sharding"] is None
    own_peak, own_warned = _xla("P('data', None, 'model')", "P('model', None)")
    assert own_warned and check["peak_bytes_after"] == own_peak < check["peak_bytes_before"]


def test_suggest_ranks_a_layout_xla_rematerializes_below_the_written_one(cli):
    """suggest chooses by lint's rule (advice.verdict.advised_version): with h kept as written (--fix h), every
    layout of embed its versions compile faster makes XLA replicate h, which the written program does not (the
    partitioner's warning, in JAX's own compile of the layout), so it keeps the written shardings and says which
    version was passed over and why; it used to suggest the solver's, about a quarter of the time."""
    result = cli("suggest", SCRIPT, "--fix", "h", "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    by = {v["name"]: v for v in t["versions"]}
    written_peak, written_warned = _xla("P('data', None, 'model')", "P(None, 'model')")
    replicated_peak, replicated_warned = _xla("P('data', None, 'model')", "P()")
    assert not written_warned and replicated_warned
    assert by["written"]["peak_bytes"] == written_peak and by["written"]["rematerialized"] == []
    assert by["replicated"]["peak_bytes"] == replicated_peak < written_peak
    assert by["replicated"]["rematerialized"][0].startswith("XLA cannot reshard f32[8,128,256] (argument h)")
    assert by["solver"]["rematerialized"] and by["solver"]["estimated_seconds"] < by["written"]["estimated_seconds"]
    assert t["chosen"] == "written", t["verdict"]
    assert [a["suggested"] for a in t["arguments"]] == [[["data"], [], ["model"]], [[], ["model"]]]
    assert "nothing compiled faster without a new rematerialization" in t["verdict"], t["verdict"]
    assert "version (estimated " in t["verdict"] and "is not suggested: XLA rematerializes with it" in t["verdict"]
