"""The catalogue of rules, in code order: each rule file's RULE, imported by name (no
registration by import side effect). Adding a rule: its code in models/rule_codes.py, its file, its line here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..models.report import RuleDoc, Severity
from . import (
    sl001_unused_suppression,
    sl101_replicating_collective,
    sl102_collective_in_loop,
    sl103_expanding_partial_sum,
    sl104_involuntary_full_rematerialization,
    sl105_unexplained_reshard,
    sl201_output_sharding_mismatch,
    sl202_missing_donation,
    sl203_replicated_argument,
    sl204_uneven_sharding,
    sl205_unusable_donation,
    sl206_propagated_uneven_sharding,
    sl207_idle_mesh_axis,
    sl208_gathered_argument,
    sl301_peak_over_budget,
    sl302_low_headroom,
    sl401_replicated_device_put_multihost,
    sl402_reduction_outside_jit,
    sl403_feedback_loop_without_out_shardings,
    sl404_host_transfer_in_loop,
)
from .registry import Rule, RuleOption, RuleTraits

_LISTED = (
    sl001_unused_suppression.RULE,
    sl101_replicating_collective.RULE,
    sl102_collective_in_loop.RULE,
    sl103_expanding_partial_sum.RULE,
    sl104_involuntary_full_rematerialization.RULE,
    sl105_unexplained_reshard.RULE,
    sl201_output_sharding_mismatch.RULE,
    sl202_missing_donation.RULE,
    sl203_replicated_argument.RULE,
    sl204_uneven_sharding.RULE,
    sl205_unusable_donation.RULE,
    sl206_propagated_uneven_sharding.RULE,
    sl207_idle_mesh_axis.RULE,
    sl208_gathered_argument.RULE,
    sl301_peak_over_budget.RULE,
    sl302_low_headroom.RULE,
    sl401_replicated_device_put_multihost.RULE,
    sl402_reduction_outside_jit.RULE,
    sl403_feedback_loop_without_out_shardings.RULE,
    sl404_host_transfer_in_loop.RULE,
)
_CODES = [r.code for r in _LISTED]
if len(set(_CODES)) != len(_CODES):  # two rules with one code: a dict would keep one without a word
    raise ValueError(f"duplicate rule code in table.py: {sorted({c for c in _CODES if _CODES.count(c) > 1})}")
RULES: dict[str, Rule] = dict(zip(_CODES, _LISTED))


def all_options() -> dict[str, RuleOption[Any]]:
    out: dict[str, RuleOption[Any]] = {}
    for r in RULES.values():
        for opt in r.options:
            out[opt.name] = opt
    return out


def codes_where(has: Callable[[RuleTraits], object]) -> frozenset[str]:
    """The codes of the rules whose traits say so (``codes_where(lambda t: t.about_state)``): the stages that
    act on a trait read it here, never a list of codes of their own."""
    return frozenset(code for code, r in RULES.items() if has(r.traits))


def find_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    if key.upper() in RULES:
        return RULES[key.upper()]
    return next((r for r in RULES.values() if r.name == key), None)


def rule_docs(disabled: frozenset[str] = frozenset(), severities: dict[str, Severity] | None = None) -> list[RuleDoc]:
    """The documentation of every enabled rule, as report models."""
    severities = severities or {}
    return [
        RuleDoc(code=r.code, name=r.name, severity=severities.get(r.code, r.severity), summary=r.summary, doc=r.doc)
        for code, r in sorted(RULES.items()) if code not in disabled
    ]
