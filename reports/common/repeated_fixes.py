"""Fix texts as a report prints them: a fix printed in full on one finding is not printed again on the findings
after it that carry the same fix, which refer to the first by its rule and line instead. The same fix: the same
text (a parameter's move that answers SL201 and SL203 of one state value, two SL105s of one weight: ten lines
each), or the same checked change measured to the same figures (suggest's whole-step FSDP version printed as
the fix of an SL103 and of several SL105s, each text naming its own weight first: the param line still says
what it gives that weight). The JSON keeps every finding's fix whole."""

from __future__ import annotations

from collections.abc import Sequence

from ...passes.models.fix_check import FixVerdict
from ...passes.models.report import Finding, where_text

# A fix this short reads as fast as a reference to it would.
SHORT_FIX = 100


def _keys(f: Finding) -> list[tuple]:
    keys: list[tuple] = [("text", f.fix)]
    c = f.fix_check
    if c is not None and c.verdict is FixVerdict.better:
        keys.append(("change", c.change, c.peak_bytes_before, c.peak_bytes_after, c.traffic_bytes_before,
                     c.traffic_bytes_after))
    return keys


def printed_fixes(findings: Sequence[Finding]) -> list[str | None]:
    """Each finding's fix as printed: in full the first time it appears, else a reference to that finding."""
    first: dict[tuple, Finding] = {}
    out: list[str | None] = []
    for f in findings:
        if not f.fix or len(f.fix) <= SHORT_FIX:
            out.append(f.fix)
            continue
        said = next((first[k] for k in _keys(f) if k in first), None)
        for k in _keys(f):
            first.setdefault(k, f)
        out.append(f.fix if said is None else f"the same as {said.rule}'s fix at {where_text(said.source, None)} above")
    return out
