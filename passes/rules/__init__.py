"""The rule registry; importing this package registers every rule."""

from . import collective_rules, io_rules, memory_rules, source_rules, suppressions  # noqa: F401  # noqa: F401  (register SL4xx and SL001)
from .registry import RULES, Rule, find_rule

__all__ = ["RULES", "Rule", "find_rule"]
