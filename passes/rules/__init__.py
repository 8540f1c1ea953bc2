"""The rules: models/rule_codes.py names them, one file each holds a rule, table.py lists them all."""

from .registry import OptionKind, Rule
from .table import RULES, find_rule

__all__ = ["RULES", "OptionKind", "Rule", "find_rule"]
