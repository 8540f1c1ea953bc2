"""What the analyzer's unattributed-reshards fix stage (analyzer/backend/unattributed_reshard_fixes.py) reads:
which findings are SL105's about one collective no argument of the step explains (passes/rules/
sl105_unexplained_reshard.py ends their message with reshard_groups' ``NO_ARGUMENT``), and that message without it."""

from __future__ import annotations

from ..models.report import Finding
from ..rules.reshard_groups import NO_ARGUMENT
from .catalogue import PARAMETER_FIXES


def is_unattributed(f: Finding) -> bool:
    """SL105's finding about one collective no argument explains, its fix not checked by an earlier stage."""
    # NO_ARGUMENT ends SL105's message alone (a parameter fix's rule), as the idle-batch stage tells its own.
    return f.rule in PARAMETER_FIXES and f.message.endswith(NO_ARGUMENT) and f.fix_check is None


def without_no_argument(message: str) -> str:
    """The finding's message without its closing clause (the stage says where the collective comes from)."""
    return message.removesuffix(NO_ARGUMENT)
