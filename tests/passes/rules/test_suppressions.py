"""suppressions: ``# shard-lint: ignore[...]`` comments found where Python's tokenizer
sees a comment (never inside a string, a docstring or an f-string), and applied to
findings as a brute force over every (finding, comment) pair says."""

from __future__ import annotations

import itertools
import random

import pytest

from jax_shard_lint.passes.models.report import Finding, Severity, SourceLocation
from jax_shard_lint.passes.rules.suppressions import Suppression, apply_suppressions, find_suppressions

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

SOURCE = '''\
x = 1  # shard-lint: ignore[SL101]
s = "# shard-lint: ignore[SL102]"
"""
# shard-lint: ignore[SL103] inside a docstring
"""
f = f"{x}  # shard-lint: ignore"
y = (x,  # shard-lint: ignore[sl201, SL202]
     2)
#shard-lint:ignore
z = 3  # a comment that says nothing
'''

EXPECTED = [(1, ("SL101",)), (7, ("SL201", "SL202")), (9, ())]


def test_only_comments_count():
    assert [(s.line, s.codes) for s in find_suppressions("a.py", SOURCE)] == EXPECTED


def test_source_that_does_not_tokenize_has_none():
    assert find_suppressions("a.py", 'x = """never closed  # shard-lint: ignore\n') == []


def _finding(rule, line, file="a.py"):
    return Finding(rule=rule, name="a-rule", severity=Severity.warning, message="m",
                   source=SourceLocation(file=file, line=line))


def _brute_force(findings, suppressions):
    def matches(f, s, code):
        return s.line == f.source.line and s.file == f.source.file and (code == "*" or f.rule == code)

    kept, used = [], set()
    for f in findings:
        # The first comment on the line that names the rule (or names none) takes the finding.
        hit = next(((i, c) for i, s in enumerate(suppressions) for c in (s.codes or ("*",)) if matches(f, s, c)), None)
        if hit is None:
            kept.append(f)
        else:
            used.add(hit)
    unused = [(s, c) for i, s in enumerate(suppressions) for c in (s.codes or ("*",)) if (i, c) not in used]
    return kept, len(findings) - len(kept), unused


def test_apply_matches_brute_force():
    rng = random.Random(0)
    rules = ["SL101", "SL102", "SL201"]
    for _ in range(300):
        findings = [_finding(rng.choice(rules), rng.randint(1, 4), rng.choice(["a.py", "b.py"]))
                    for _ in range(rng.randint(0, 6))]
        suppressions = [Suppression(rng.choice(["a.py", "b.py"]), rng.randint(1, 4),
                                    tuple(sorted(set(rng.sample(rules, rng.randint(0, 2))))))
                        for _ in range(rng.randint(0, 4))]
        outcome = apply_suppressions(findings, suppressions, lambda a, b: a == b)
        kept, suppressed, unused = _brute_force(findings, suppressions)
        assert (list(outcome.kept), outcome.suppressed, list(outcome.unused)) == (kept, suppressed, unused)


def test_every_code_of_a_comment_is_used_or_reported():
    s = Suppression("a.py", 1, ("SL101", "SL102"))
    for rules in itertools.combinations(["SL101", "SL102"], 1):
        outcome = apply_suppressions([_finding(r, 1) for r in rules], [s], lambda a, b: a == b)
        assert [c for _, c in outcome.unused] == [c for c in s.codes if c not in rules]
