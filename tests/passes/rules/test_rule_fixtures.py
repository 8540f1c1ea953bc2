"""Every rule, positive and negative, on fixture scripts whose expected findings
are written on the offending line, mypy's test-data style (ruff's snapshot habit, by prefix):

    y = jnp.cumsum(x, axis=0)  # E: SL101 all-reduce over x materialises  # Fix: shard x as

``# E: CODE`` alone (or ``# E: SL201, SL202``) expects those rules' findings at that line. Text after
the code is the start of the finding's message and ``# Fix: TEXT`` the start of its fix, compared as
prefixes (whitespace as written; a prefix stops before figures that differ between JAX releases).
The fix is the rule's own text as this test's run prints it: fixes are not compiled and measured here
(tests/conftest.py sets JAX_SHARD_LINT_NO_FIX_CHECK; test_fix_checks.py turns them on), so no "(checked: ...)" tail,
and a fix the check would replace (SL203's P(('data', 'model')) where the measured one is
P(None, ('data', 'model'))) is
the rule's proposal.
Messages are opt-in per fixture: once one expectation of a fixture carries a message, every one
of that fixture's must carry a message and a fix, so a fixture is checked either on (line, code)
alone (a new rule's, until its text settles) or on line, code, message and fix throughout. Several
expectations on a line are written one after the other (``# E: SL201 ...  # Fix: ...  # E: SL202 ...``).

A fixture may name CLI arguments in its docstring: ``shard-lint-args: --budget 20MiB``.
"""

import glob
import json
import os
import re
import shlex
from dataclasses import dataclass

import pytest
from conftest import FIXTURES

SCRIPTS = sorted(glob.glob(os.path.join(FIXTURES, "scripts", "sl*.py")))
# One ``# E: ...`` or ``# Fix: ...`` comment, up to the next one or the end of the line.
_COMMENT = re.compile(r"#\s*(E|Fix):\s*(.*?)\s*(?=#\s*(?:E|Fix):|$)")
_CODES = re.compile(r"([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)(?:\s+(.+))?")


@dataclass
class Expectation:
    line: int
    code: str
    message: str | None = None  # the message's start, where the fixture writes one
    fix: str | None = None  # the fix's start

    def matches(self, finding: dict) -> bool:
        return (finding["source"]["line"] == self.line and finding["rule"] == self.code
                and (self.message is None or finding["message"].startswith(self.message))
                and (self.fix is None or (finding["fix"] or "").startswith(self.fix)))


def expectations(path) -> list[Expectation]:
    out: list[Expectation] = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            for kind, text in _COMMENT.findall(line.rstrip()):
                if kind == "Fix":
                    alone = not (out and out[-1].line == lineno and out[-1].fix is None)
                    assert not alone, f"{path}:{lineno}: # Fix: with no # E: before it"
                    out[-1].fix = text
                    continue
                m = _CODES.fullmatch(text)
                assert m, f"{path}:{lineno}: # E: names no rule code: {text!r}"
                codes = re.split(r"\s*,\s*", m.group(1))
                assert len(codes) == 1 or m.group(2) is None, f"{path}:{lineno}: a message belongs to one code"
                out += [Expectation(lineno, code, m.group(2)) for code in codes]
    if any(e.message is not None for e in out):  # the fixture opted in: every expectation says both
        for e in out:
            assert e.message and e.fix, f"{path}:{e.line}: {e.code} needs its message and '# Fix:' written out"
    return out


def expected(path):
    return {(e.line, e.code) for e in expectations(path)}


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
    findings = [f for t in report["targets"] for f in t["findings"]] + report["findings"]
    for e in expectations(script):
        assert any(e.matches(f) for f in findings), (
            f"{os.path.basename(script)}:{e.line}: no {e.code} finding starts with the message and fix written: "
            f"{e.message!r} / {e.fix!r}; found: "
            f"{[(f['message'], f['fix']) for f in findings if (f['source']['line'], f['rule']) == (e.line, e.code)]}")


def test_expectation_comments_are_read_as_written(tmp_path):
    """The comment syntax itself: codes alone, a message and fix, two on a line, a fixture half opted in."""
    script = tmp_path / "sl999_example.py"
    script.write_text("a = 1  # E: SL201, SL202\n"
                      "b = 2  # E: SL101 all-reduce over x  # Fix: shard x as P('x')  # E: SL105 a reshard # 1\n")
    with pytest.raises(AssertionError, match="SL201 needs its message and '# Fix:' written out"):
        expectations(script)
    script.write_text("a = 1  # E: SL201 output result comes back as P()  # Fix: pin it\n")
    assert expectations(script) == [Expectation(1, "SL201", "output result comes back as P()", "pin it")]
    finding = {"source": {"line": 1}, "rule": "SL201", "message": "output result comes back as P() but ...",
               "fix": "pin it"}
    assert expectations(script)[0].matches(finding)
    assert not expectations(script)[0].matches({**finding, "fix": "donate it"})


def test_every_rule_has_a_positive_fixture():
    from jax_shard_lint.passes.rules.table import RULES

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
