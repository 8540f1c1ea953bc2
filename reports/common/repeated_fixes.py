"""Fix texts as a report prints them: a fix printed in full on one finding is not printed again on the findings
after it that carry the same text (a parameter's move that answers SL201 and SL203 of one state value, two
SL105s of one weight: ten lines each), which refer to the first by its rule and line instead. The JSON keeps
every finding's fix whole."""

from __future__ import annotations

from collections.abc import Sequence

from ...passes.models.report import Finding, where_text

# A fix this short reads as fast as a reference to it would.
SHORT_FIX = 100


def printed_fixes(findings: Sequence[Finding]) -> list[str | None]:
    """Each finding's fix as printed: in full the first time its text appears, else a reference to that finding."""
    first: dict[str, Finding] = {}
    out: list[str | None] = []
    for f in findings:
        if not f.fix or len(f.fix) <= SHORT_FIX:
            out.append(f.fix)
            continue
        said = first.setdefault(f.fix, f)
        out.append(f.fix if said is f else
                   f"the same as {said.rule}'s fix at {where_text(said.source, None)} above")
    return out
