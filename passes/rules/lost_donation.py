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


def lost_donation_clause(folded: list[Finding]) -> str:
    """SL205's why, as a clause of the SL201 finding about the same values (one, or a parameter with its
    optimizer state: one clause naming each)."""
    # "params['w'] is donated, but no output reuses its 8.0 MiB per device"
    lost = [f.message.split(":", 1)[0] for f in folded]
    if len(lost) == 1:
        said = lost[0]
    else:
        names = [f.parameter or "" for f in folded]
        said = f"{', '.join(names[:-1])} and {names[-1]} are donated, but no output reuses them"
    return (f"; {said} (SL205: jit drops the donation of an input whose output comes back on another sharding), "
            "so the step holds both buffers")


def _covered(f: Finding) -> list[str]:
    return list(f.parameters) or ([f.parameter] if f.parameter else [])


def merge_lost_donations(findings: list[Finding]) -> list[Finding]:
    """The findings with each SL205 about a resharded output (the one whose fix pins the output to the
    input's sharding) folded into the SL201 finding about the same parameter (or the SL201 finding that
    stands for it with its optimizer state or its layers)."""
    resharded = {f.parameter: f for f in findings
                 if f.rule == SL205.code and f.suggested_sharding is not None and f.parameter}
    owner: dict[str, int] = {}  # parameter -> the SL201 finding (its index) that covers it
    for i, f in enumerate(findings):
        if f.rule == SL201.code:
            for p in _covered(f):
                owner.setdefault(p, i)
    folded = {p: f for p, f in resharded.items() if p in owner}
    if not folded:
        return findings
    into: dict[int, list[Finding]] = {}
    for p, f in folded.items():
        into.setdefault(owner[p], []).append(f)
    out = []
    for i, f in enumerate(findings):
        if f.rule == SL205.code and f.parameter in folded and folded[f.parameter] is f:
            continue
        if i in into:
            order = {p: k for k, p in enumerate(_covered(f))}
            merged = sorted(into[i], key=lambda g: order.get(g.parameter or "", len(order)))
            f = f.model_copy(update={"message": f.message + lost_donation_clause(merged)})
        out.append(f)
    return out
