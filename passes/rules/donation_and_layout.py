"""One finding for a donated state value that comes back on another layout.

When a step's output comes back on another sharding than the donated input it
replaces, two rules see one cause: SL201 (the next step reshards it on entry)
and SL205 (no output reuses the donated buffer: jit drops a donation whose
output has another per-device shape). One fix answers both, the output pinned
to the input's layout, which SL201's fix checks. So SL205 is folded into the
SL201 about the same input: its loss is said in SL201's message, and SL205 is
not reported on its own. An SL205 with another reason (a dtype change, every
output of the layout already reusing another buffer) stays as it is.
"""

from __future__ import annotations

from ..models.report import Finding
from ..models.rule_codes import SL201, SL205


def _inputs(f: Finding) -> set[str]:
    return set(f.parameters or []) | ({f.parameter} if f.parameter else set())


def one_finding_per_donated_value(findings: list[Finding]) -> list[Finding]:
    """``findings`` with each SL205 about an input an SL201 names folded into that SL201."""
    layout = [k for k, f in enumerate(findings) if f.rule == SL201.code]
    out = list(findings)
    folded: set[int] = set()
    for j, lost in enumerate(findings):
        if lost.rule != SL205.code or lost.subject is None or "comes out as" not in lost.message:
            continue
        k = next((k for k in layout if lost.subject in _inputs(out[k])), None)
        if k is None:
            continue
        # The message's first clause: "<input> is donated, but no output reuses its N per device".
        loss = lost.message.split(": ", 1)[0]
        out[k] = out[k].model_copy(update={"message": f"{out[k].message}; and {loss}"})
        folded.add(j)
    return [f for j, f in enumerate(out) if j not in folded]
