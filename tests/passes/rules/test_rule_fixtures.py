"""Every rule, positive and negative, on fixture scripts whose expected findings
are written on the offending line as ``# E: CODE`` (mypy's test-data style).

A fixture may name CLI arguments in its docstring: ``shard-lint-args: --budget 20MiB``.
"""

import glob
import json
import os
import re
import shlex

import pytest
from conftest import FIXTURES

SCRIPTS = sorted(glob.glob(os.path.join(FIXTURES, "scripts", "sl*.py")))
_EXPECT = re.compile(r"#\s*E:\s*([A-Z0-9,\s]+)$")


def expected(path):
    out = set()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            m = _EXPECT.search(line.rstrip())
            if m:
                out |= {(lineno, code) for code in re.split(r"[,\s]+", m.group(1).strip()) if code}
    return out


def extra_args(path):
    m = re.search(r"shard-lint-args:(.*)", open(path).read())
    return shlex.split(m.group(1)) if m else []


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.basename(s) for s in SCRIPTS])
def test_findings_match_inline_expectations(cli, script):
    result = cli("lint", script, "--format", "json", "-q", "--fail-on", "never", *extra_args(script))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    found = set()
    for f in [f for t in report["targets"] for f in t["findings"]] + report["findings"]:
        assert f["source"] is not None, f"{f['rule']} has no source line: {f['message']}"
        assert os.path.abspath(f["source"]["file"]) == script, f
        assert f["fix"], f"{f['rule']} names no fix"
        found.add((f["source"]["line"], f["rule"]))
    assert found == expected(script)


def test_every_rule_has_a_positive_fixture():
    from jax_shard_lint.passes.rules import RULES

    covered = {code for s in SCRIPTS for _, code in expected(s)}
    assert covered == set(RULES)


def test_suppression_is_counted(cli):
    script = os.path.join(FIXTURES, "scripts", "sl001_unused_suppression.py")
    report = json.loads(cli("lint", script, "--format", "json", "-q").out)
    assert {t["name"]: t["suppressed"] for t in report["targets"]} == {"lookup": 1, "double": 0}


def test_target_filter_does_not_call_suppressions_unused(cli):
    script = os.path.join(FIXTURES, "scripts", "sl001_unused_suppression.py")
    report = json.loads(cli("lint", script, "--target", "lookup", "--format", "json", "-q").out)
    assert report["findings"] == []


def test_sl104_fix_is_what_xla_compiles_without_the_warning(cli):
    """SL104's staged fix, written out in the fixture as its own target, compiles with no involuntary
    rematerialization and moves a sixth of the bytes (XLA's figures, both targets compiled here)."""
    script = os.path.join(FIXTURES, "scripts", "sl104_involuntary_full_rematerialization.py")
    report = json.loads(cli("lint", script, "--format", "json", "-q", "--fail-on", "never", "--ignore", "SL201").out)
    targets = {t["name"]: t for t in report["targets"]}
    (finding,) = targets["at_once"]["findings"]
    assert "P('model', 'data')) then jax.sharding.reshard(..., P(None, ('data', 'model')))" in finding["fix"]
    assert targets["one_axis_at_a_time"]["findings"] == []
    moved = {name: sum(c["bytes"] * c["count"] for c in t["collectives"]) for name, t in targets.items()}
    assert moved["one_axis_at_a_time"] * 6 == moved["at_once"]
    # The whole value on every device: the replicating all-gather has the global shape.
    assert any(c["shape"] == [16, 64, 32] for c in targets["at_once"]["collectives"])
