"""The rule catalogue as the analyzer reads it: the rules (``rule`` and ``rules`` print them, the
configuration and the arguments name them and their options), and the codes whose traits, declared in
each rule's file, ask a stage of the analyzer to act (the fix checks compile a parameter's new sharding
or a stated layout edited; the solver fixes try suggest's layout; the state fix checks give one advice).
No stage keeps a list of codes of its own."""

from __future__ import annotations

from typing import Any

from ..models.fix_check import StatedLayoutEdit
from ..models.report import Finding
from ..rules.registry import FixKind, OptionKind
from ..rules.table import RULES, all_options, codes_where, find_rule, rule_docs

# RULES, OptionKind, all_options, find_rule and rule_docs are rules/'s, handed on on purpose: the analyzer
# may not import rules/ (tests/test_architecture_reexports.py lists every name handed on, and why).
__all__ = ["RULES", "OptionKind", "all_options", "find_rule", "rule_docs", "PARAMETER_FIXES",
           "STATED_LAYOUT_FIXES", "STATE_RULES", "ARGUMENT_LAYOUT_RULES", "DONATION_FIXES", "STATE_ARGUMENT_FIXES",
           "OTHER_DIMENSION_FIXES", "REMATERIALIZATION_RULES", "OUTPUT_LAYOUT_RULES", "TRAFFIC_RULES",
           "LOOP_WEIGHT_GATHER_FIXES", "MEASURED_RULES",
           "stands_for_a_group_without_own_fix", "measured_enough",
           "layout_edit"]

# Findings whose fix is a new PartitionSpec for the argument they name, compiled and measured.
PARAMETER_FIXES = codes_where(lambda t: t.fix is FixKind.parameter)
# Findings whose fix edits a layout the program states (a constraint, an output pin), compiled and measured.
STATED_LAYOUT_FIXES = codes_where(lambda t: t.fix is FixKind.stated_layout)
# Findings whose fix is the argument they name donated, compiled and measured.
DONATION_FIXES = codes_where(lambda t: t.fix is FixKind.donation)
# The rules about an output's layout (SL201): one on a layout the jit call's out_shardings states is that call's.
OUTPUT_LAYOUT_RULES = codes_where(lambda t: t.about_output_layout)
# Findings about a step's state: one recommendation for the values they share (pin, or take the layout).
STATE_RULES = codes_where(lambda t: t.about_state)
# Findings about the layout of the arguments they name: suggest's layout is tried where their own fix fails.
ARGUMENT_LAYOUT_RULES = codes_where(lambda t: t.argument_layout)
# Findings about a step's state whose own fix is the argument's new sharding: the state fixes are tried first,
# their own after; the other state findings about the same values take their advice.
STATE_ARGUMENT_FIXES = codes_where(lambda t: t.about_state and t.fix is FixKind.parameter)
# Findings whose second choice is their axes on the argument's last dimension they divide.
OTHER_DIMENSION_FIXES = codes_where(lambda t: t.other_dimension)
# Findings about the traffic a step moves: a fix that lowers the peak alone is not theirs.
TRAFFIC_RULES = codes_where(lambda t: t.about_traffic)
# Findings about a loop body's collectives whose fix is the weight a matmul there reads gathered in the body.
LOOP_WEIGHT_GATHER_FIXES = codes_where(lambda t: t.loop_weight_gather)
# Findings that stand only where their own fix is measured to do enough: dropped where it was compiled and is not.
MEASURED_RULES = codes_where(lambda t: t.measured_enough is not None)
# Findings that say XLA replicates a value to compile the program: a fix compiled with one is not better.
REMATERIALIZATION_RULES = codes_where(lambda t: t.rematerialization)


def stands_for_a_group_without_own_fix(f: Finding) -> bool:
    """A finding that stands for a group with nothing to act on unless a state fix is measured better (its
    rule's ``group_without_own_fix`` trait: SL201's small outputs)."""
    rule = RULES.get(f.rule)
    return rule is not None and rule.traits.group_without_own_fix is not None and rule.traits.group_without_own_fix(f)


def measured_enough(f: Finding, options: dict[str, Any]) -> bool:
    """Whether a finding that stands only where its own fix is measured to do enough (its rule's
    ``measured_enough`` trait: SL208) does, by its fix check and the resolved options; True for any other."""
    rule = RULES.get(f.rule)
    check = rule.traits.measured_enough if rule is not None else None
    return check is None or (f.fix_check is not None and check(f.fix_check, options))


def layout_edit(f: Finding) -> StatedLayoutEdit | None:
    """Which edit of a stated layout compiles the finding's fix (its rule's ``layout_edit`` trait), or None."""
    rule = RULES.get(f.rule)
    return rule.traits.layout_edit if rule is not None else None
