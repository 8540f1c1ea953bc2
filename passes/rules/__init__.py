"""The rules: models/rule_codes.py names them, one file each holds a rule, table.py lists them all."""

from .registry import FixKind, OptionKind, Provenance, Rule, RuleTraits
from .table import RULES, find_rule

__all__ = ["RULES", "FixKind", "OptionKind", "Provenance", "Rule", "RuleTraits", "find_rule"]
