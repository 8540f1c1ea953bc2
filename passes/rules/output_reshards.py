"""The collectives XLA adds where an output leaves the program on another layout
are the SL201 finding's, not a second finding's.

An output pinned (or propagated) to another sharding than the one the program
computes it in is moved at the program's end by a collective with no source
line (XLA adds it at the boundary): an all-gather of the state onto fewer axes,
say. SL101 or SL105 (the rules whose traits say ``boundary_collectives``)
would report that collective as a finding of its own with no line and no
argument, beside the SL201 finding that names the output, its input and the
fix. The SL201 finding stands for it (in its ``ops``); the
collective is not reported twice. An SL201 finding that stands for several
outputs (a parameter and its optimizer moments, every layer's weight) claims the
collectives of each; an SL101 group of boundary collectives of which only some
are claimed keeps the others.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..hlo.collective_origin import outputs_depending_on, outputs_returning
from ..hlo.module import HloModule
from ..models.report import Collective, Finding, TensorInfo
from ..models.rule_codes import SL201
from .table import codes_where

# The rules whose findings can stand for such a collective: their traits, declared in their files.
_CLAIMABLE = codes_where(lambda t: t.boundary_collectives)


def claim_output_reshards(module: HloModule, findings: list[Finding], outputs: tuple[TensorInfo, ...],
                          collectives: Iterable[Collective]) -> list[Finding]:
    index = {t.path: t.index for t in outputs}
    state = [f for f in findings if f.rule == SL201.code and f.subject]
    reshards = {c.hlo_name: c for c in collectives if c.intent == "reshard"}
    at_boundary = sorted(n for n, c in reshards.items() if c.source is None)
    if not state or not reshards:
        return findings
    # A collective with no line that an output depends on; or one whose result is an output, moved by
    # copies only, whatever line its metadata names (newer XLA gives the boundary gather its operand's).
    depends = outputs_depending_on(module, at_boundary) if at_boundary else {}
    for k, names in outputs_returning(module, reshards).items():
        depends[k] = sorted({*depends.get(k, []), *names})
    claimed: dict[str, Finding] = {}
    for f in state:
        # A merged finding lists its outputs' paths in its ops; a single one names its output as subject.
        for path in [f.subject or "", *(op for op in f.ops if op in index)]:
            for name in depends.get(index.get(path, -1), []):
                claimed.setdefault(name, f)
    if not claimed:
        return findings
    ops: dict[int, list[str]] = {}
    for name, f in claimed.items():
        ops.setdefault(id(f), []).append(name)
    out = []
    for f in findings:
        if f.rule in _CLAIMABLE:
            members = f.ops or [f.subject or ""]
            kept = [n for n in members if n not in claimed]
            if not kept:
                continue
            if len(kept) < len(members):
                f = _without_claimed(f, kept, reshards)
        if id(f) in ops:
            f = f.model_copy(update={"ops": sorted({*f.ops, *ops[id(f)]})})
        out.append(f)
    return out


def _without_claimed(f: Finding, kept: list[str], reshards: dict[str, Collective]) -> Finding:
    """A group of a rule with ``boundary_collectives`` (SL101, SL105) that keeps only the collectives no
    SL201 finding claimed: its count, bytes and ops theirs; its subject the largest of them."""
    sizes = {n: reshards[n].bytes * reshards[n].count for n in kept if n in reshards}
    subject = f.subject if f.subject in kept else max(kept, key=lambda n: (sizes.get(n, 0), n))
    total = sum(sizes.values()) if len(sizes) == len(kept) else f.bytes
    return f.model_copy(update={"ops": kept if len(kept) > 1 else [], "count": len(kept), "bytes": total,
                                "subject": subject})
