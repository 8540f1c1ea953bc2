"""SL202's fix, a jit option (``donate_argnums``) rather than a sharding, compiled like the others
(fix_checks.py): each argument SL202 names donated by itself."""

from __future__ import annotations

from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, TensorInfo
from .fix_verdicts import _cost_text, _not_offered


def donors_of(f: Finding, inputs: list[TensorInfo]) -> frozenset[int]:
    """The inputs SL202's finding would donate: every array of the argument it names not donated yet."""
    return frozenset(t.index for t in inputs if not t.donated and t.path.split("[")[0] == f.subject)


def donation_checked(f: Finding, check: FixCheck) -> Finding:
    """SL202 with its donation compiled: the fix printed with what it measured, or what was tried."""
    if check.verdict is FixVerdict.better:
        return f.model_copy(update={"fix_check": check, "fix": f"{f.fix} (checked: {_cost_text(check)})"})
    return f.model_copy(update={"fix_check": check,
                                "fix": f"{f.fix} was tried, compiled and {_not_offered(check)}"})
