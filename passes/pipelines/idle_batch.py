"""What the analyzer's idle-batch fix stage (analyzer/backend/idle_batch_fixes.py) reads: which findings are
SL105's about a batch that leaves mesh axes idle (passes/rules/idle_batch_axes.py)."""

from __future__ import annotations

from ..models.report import Finding
from ..rules.idle_batch_axes import IDLE_BATCH_WHY
from .catalogue import PARAMETER_FIXES


def is_idle_batch_finding(f: Finding) -> bool:
    """SL105's finding about a batch that leaves mesh axes idle (its first provenance line says so)."""
    return f.rule in PARAMETER_FIXES and f.provenance[:1] == [IDLE_BATCH_WHY]
