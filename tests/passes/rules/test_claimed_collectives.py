"""A collective a rule's findings explain is claimed (``RuleTraits.claims``) and never reported again as
unexplained resharding (SL105): for any rule, SL105 imports none. A toy rule, registered here and in no
table, claims the all-to-all that moves fixtures/scripts/sl105_unexplained_reshard.py's w1 (128 MiB per
device, named by XLA's compiled program); SL105 reports it without the toy rule and leaves it to the toy
rule with it."""

import os

import pytest
from conftest import FIXTURES, lint_targets

from jax_shard_lint.passes.models.report import Severity
from jax_shard_lint.passes.models.rule_codes import Code, Scope
from jax_shard_lint.passes.rules import table
from jax_shard_lint.passes.rules.registry import RuleTraits, define_rule

SCRIPT = os.path.join(FIXTURES, "scripts", "sl105_unexplained_reshard.py")


def _all_to_alls(ctx):
    return [c.hlo_name for c in ctx.collectives if c.kind == "all-to-all"]


def toy_claim(ctx, out):
    """A toy rule that claims every all-to-all.

    What it does
    ------------
    Reports each all-to-all.
    """
    for name in _all_to_alls(ctx):
        out.emit(f"{name} is the toy rule's", None, subject=name)


TOY = define_rule(Code("SL999", "toy-claim", Scope.TARGET), Severity.warning, toy_claim,
                  traits=RuleTraits(claims=_all_to_alls))


def _subjects(target, code):
    """The collectives the rule's findings stand for (a finding grouped by cause names several: its ops)."""
    return {op for f in target["findings"] if f["rule"] == code for op in (f.get("ops") or [f["subject"]])}


@pytest.mark.filterwarnings("ignore")
def test_a_collective_a_new_rule_claims_is_not_reported_again_as_unexplained(cli, monkeypatch):
    [before] = lint_targets(cli, SCRIPT, "--target", "contracted", "--no-cache")
    unexplained = _subjects(before, "SL105")
    assert "SL999" not in {f["rule"] for f in before["findings"]}
    monkeypatch.setitem(table.RULES, TOY.code, TOY)
    [after] = lint_targets(cli, SCRIPT, "--target", "contracted", "--no-cache")
    claimed = _subjects(after, "SL999")
    # The all-to-all is in XLA's compiled program, SL105's before the toy rule claims it, the toy rule's after.
    assert claimed and claimed <= {c["hlo_name"] for c in before["collectives"] if c["kind"] == "all-to-all"}
    assert claimed <= unexplained
    # The all-gather of the product at the same line is no rule's: still SL105's.
    assert _subjects(after, "SL105") == unexplained - claimed != set()
