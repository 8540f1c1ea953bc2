"""One finding for a donated state value that comes back on another sharding.

jit drops the donation of an input whose output comes back on another sharding
(its per-device buffer differs), so such a value is both an output that comes
back on another layout (SL201) and a donation no output reuses (SL205). It is
one cause with one fix, pinning the output to the input's layout, which also
gives XLA the donated buffer back: the SL201 finding says both, and the SL205
finding of that parameter is not printed a second time. With SL201 ignored,
SL205 stands alone.
"""

from __future__ import annotations

from ..models.report import Finding
from ..models.rule_codes import SL201, SL205


def lost_donation_clause(f: Finding) -> str:
    """SL205's why, as a clause of the SL201 finding about the same value."""
    lost = f.message.split(":", 1)[0]  # "params['w'] is donated, but no output reuses its 8.0 MiB per device"
    return (f"; {lost} (SL205: jit drops the donation of an input whose output comes back on another sharding), "
            "so the step holds both buffers")


def merge_lost_donations(findings: list[Finding]) -> list[Finding]:
    """The findings with each SL205 about a resharded output (the one whose fix pins the output to the
    input's sharding) folded into the SL201 finding about the same parameter."""
    resharded = {f.parameter: f for f in findings
                 if f.rule == SL205.code and f.suggested_sharding is not None and f.parameter}
    state = {f.parameter for f in findings if f.rule == SL201.code and f.count == 1 and f.parameter}
    folded = {p: f for p, f in resharded.items() if p in state}
    if not folded:
        return findings
    out = []
    for f in findings:
        if f.rule == SL205.code and f.parameter in folded and folded[f.parameter] is f:
            continue
        if f.rule == SL201.code and f.count == 1 and f.parameter in folded:
            f = f.model_copy(update={"message": f.message + lost_donation_clause(folded[f.parameter])})
        out.append(f)
    return out
