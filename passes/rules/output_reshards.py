"""The collectives XLA adds where an output leaves the program on another layout
are the SL201 finding's, not a second finding's.

An output pinned (or propagated) to another sharding than the one the program
computes it in is moved at the program's end by a collective with no source
line (XLA adds it at the boundary): an all-gather of the state onto fewer axes,
say. SL101 or SL105 would report that collective as a finding of its own with
no line and no argument, beside the SL201 finding that names the output, its
input and the fix. The SL201 finding stands for it (in its ``ops``); the
collective is not reported twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..hlo.collective_origin import outputs_depending_on
from ..hlo.module import HloModule
from ..models.report import Collective, Finding, TensorInfo
from ..models.rule_codes import SL101, SL105, SL201

_CLAIMABLE = frozenset({SL101.code, SL105.code})


def claim_output_reshards(module: HloModule, findings: list[Finding], outputs: tuple[TensorInfo, ...],
                          collectives: Iterable[Collective]) -> list[Finding]:
    state = [f for f in findings if f.rule == SL201.code and f.count == 1 and f.subject]
    boundary = sorted(c.hlo_name for c in collectives if c.source is None and c.intent == "reshard")
    if not state or not boundary:
        return findings
    depends = outputs_depending_on(module, boundary)
    index = {t.path: t.index for t in outputs}
    claimed: dict[str, Finding] = {}
    for f in state:
        for name in depends.get(index.get(f.subject or "", -1), []):
            claimed.setdefault(name, f)
    if not claimed:
        return findings
    ops: dict[int, list[str]] = {}
    for name, f in claimed.items():
        ops.setdefault(id(f), []).append(name)
    out = []
    for f in findings:
        if f.rule in _CLAIMABLE and f.source is None and all(n in claimed for n in (f.ops or [f.subject or ""])):
            continue
        if id(f) in ops:
            f = f.model_copy(update={"ops": sorted({*f.ops, *ops[id(f)]})})
        out.append(f)
    return out
