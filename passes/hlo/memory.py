"""Per-device memory of a compiled program.

The peak is XLA's own accounting, temp + argument + output - alias, from
``compiled.memory_analysis()``. What is live at the peak and how live bytes move
over program order come from the live-range and buffer-assignment reports XLA
writes beside its dumps (``*-live-range.txt``, ``*-buffer-assignment.txt``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..common.shapes import parse_arrays
from ..models.errors import MalformedReport
from ..models.memory_stats import MemoryStats
from ..models.report import LiveBuffer, MemorySummary, MemoryTimelinePoint
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .constant_fills import fill_consumer
from .copied_values import argument_behind, copied_value
from .fused_sources import fused_ops_source
from .module import HloModule

_PEAK_HEADER = re.compile(r"^\s*Live ranges at (\d+) \(peak\):")
_PEAK_ENTRY = re.compile(r"^\s*([\w.\-]+)(\{[\d,]*\})?: (\d+) bytes")
_RANGE_ENTRY = re.compile(r"^\s*([\w.\-]+)(\{[\d,]*\})?:(-?\d+)-(-?\d+)\s*$")
_SEQUENCE_ENTRY = re.compile(r"^\s*(\d+):([\w.\-]+)\s*$")
_PEAK_TOTAL = re.compile(r"Stack trace breakdown for peak usage: ([\d\s]+) bytes")
_VALUE = re.compile(r"value: <\d+ ([\w.\-]+)(\{[\d,]*\})?(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)")

# Timelines longer than this are thinned for the reports; the peak step is always kept.
MAX_TIMELINE_POINTS = 400


@dataclass(frozen=True)
class LiveRangeReport:
    peak_step: int | None
    peak_bytes: int | None
    at_peak: tuple[tuple[str, int], ...]
    ranges: tuple[tuple[str, int, int], ...]
    sequence_length: int


def parse_live_range_report(text: str) -> LiveRangeReport:
    peak_step, at_peak, ranges, seq_len, section = None, [], [], 0, None
    peak_total = None
    for line in text.splitlines():
        m = _PEAK_HEADER.match(line)
        if m:
            peak_step, section = int(m.group(1)), "peak"
            continue
        if line.strip() == "BufferLiveRange:":
            section = "ranges"
            continue
        if line.strip() == "InstructionSequence:":
            section = "sequence"
            continue
        if line.strip().startswith("Stack trace breakdown"):
            section = None
            t = _PEAK_TOTAL.search(line)
            if t:
                peak_total = int(t.group(1).replace(" ", ""))
            continue
        if section == "peak":
            m = _PEAK_ENTRY.match(line)
            if m:
                at_peak.append((m.group(1) + _index(m.group(2)), int(m.group(3))))
        elif section == "ranges":
            m = _RANGE_ENTRY.match(line)
            if m:
                ranges.append((m.group(1) + _index(m.group(2)), int(m.group(3)), int(m.group(4))))
        elif section == "sequence":
            if _SEQUENCE_ENTRY.match(line):
                seq_len += 1
    if peak_total is None and at_peak:
        peak_total = sum(b for _, b in at_peak)
    return LiveRangeReport(peak_step, peak_total, tuple(at_peak), tuple(ranges), seq_len)


def _index(idx: str | None) -> str:
    return "" if not idx or idx == "{}" else idx


def parse_buffer_values(text: str) -> dict[str, tuple[int, int, int]]:
    """Where every HLO value of a buffer-assignment report lives, by ``name{index}``:
    (allocation, offset, size)."""
    slices: dict[str, tuple[int, int, int]] = {}
    allocation = -1
    for line in text.splitlines():
        a = _ALLOCATION.match(line)
        if a:
            allocation = int(a.group(1))
            continue
        m = _VALUE.search(line)
        if m:
            slices[m.group(1) + _index(m.group(2))] = (allocation, int(m.group(4)), int(m.group(3)))
    return slices


def _timeline(report: LiveRangeReport, slices: dict[str, tuple[int, int, int]]) -> list[MemoryTimelinePoint]:
    """Bytes live at each step of the entry's instruction sequence.

    Values that share a buffer (a while loop's phis, aliased tuple elements) share
    an allocation slice, so live bytes are the union of live slices, not a sum of
    values. One sweep over start/end events: each allocation's byte range is cut
    at the slice boundaries, and a segment counts while any live slice covers it,
    so the cost is the number of ranges (times the few segments a slice spans),
    not ranges times steps.
    """
    if not report.ranges or not slices:
        return []
    last = max(max(end for _, _, end in report.ranges), report.sequence_length - 1)
    events: list[tuple[int, int, tuple[int, int, int]]] = []
    bounds: dict[int, set[int]] = {}
    for name, start, end in report.ranges:
        where = slices.get(name)
        if where is None or start < 0 or end < start:
            continue
        events.append((start, 1, where))
        events.append((min(end, last) + 1, -1, where))
        alloc, offset, size = where
        bounds.setdefault(alloc, set()).update((offset, offset + size))
    cuts = {a: sorted(b) for a, b in bounds.items()}
    index = {a: {x: i for i, x in enumerate(c)} for a, c in cuts.items()}
    cover = {a: [0] * len(c) for a, c in cuts.items()}
    events.sort(key=lambda e: (e[0], e[1]))
    total = 0
    change_steps: list[int] = []
    change_totals: list[int] = []
    i = 0
    while i < len(events):
        step = events[i][0]
        while i < len(events) and events[i][0] == step:
            _, delta, (alloc, offset, size) = events[i]
            c, counts = cuts[alloc], cover[alloc]
            for seg in range(index[alloc][offset], index[alloc][offset + size]):
                before = counts[seg]
                counts[seg] += delta
                if before == 0 and delta > 0:
                    total += c[seg + 1] - c[seg]
                elif counts[seg] == 0 and delta < 0:
                    total -= c[seg + 1] - c[seg]
            i += 1
        change_steps.append(step)
        change_totals.append(total)

    def at(step: int) -> int:
        k = bisect.bisect_right(change_steps, step) - 1
        return change_totals[k] if k >= 0 else 0

    steps: Sequence[int]
    if last + 1 <= MAX_TIMELINE_POINTS:
        steps = range(last + 1)
    else:
        stride = -(-(last + 1) // MAX_TIMELINE_POINTS)
        steps = sorted(set(range(0, last + 1, stride)) | {last} | (
            {report.peak_step} if report.peak_step is not None and 0 <= report.peak_step <= last else set()))
    make = MemoryTimelinePoint.model_construct
    return [make(step=step, bytes=at(step)) for step in steps]


def summarize_memory(
    stats: MemoryStats,
    platform: str,
    hlo: HloModule | None = None,
    live_range_text: str | None = None,
    buffer_assignment_text: str | None = None,
    budget_bytes: int | None = None,
    ownership: CodeOwnership = DEFAULT_OWNERSHIP,
) -> MemorySummary:
    live: list[LiveBuffer] = []
    report = parse_live_range_report(live_range_text) if live_range_text else None
    if report:
        for name, nbytes in report.at_peak:
            base = name.split("{")[0]
            ins = hlo.instruction(base) if hlo else None
            arrays = parse_arrays(ins.shape) if ins else []
            main = arrays[0] if len(arrays) == 1 else None
            source, via = hlo.attribution_of(ins, ownership) if hlo and ins else (None, None)
            op_name = ins.op_name if ins else None
            # A copy XLA added has no line of its own: the copied value's (its op's, or the argument's path).
            copied = copied_value(hlo, ins) if hlo and ins and source is None and not op_name else None
            copy_of = None
            if copied is not None and hlo is not None:
                argument = copied.opcode == "parameter" and hlo.computation_of(copied.name) == hlo.entry
                copy_of = f"argument {copied.op_name}" if argument and copied.op_name else copied.name
                source, via = hlo.attribution_of(copied, ownership)
                behind = argument_behind(hlo, copied) if source is None and not argument else None
                copy_of += f" of argument {behind}" if behind else ""
                op_name = None if argument else copied.op_name
            # A buffer XLA fills from constants (a wrapped_broadcast) has no line either: its consumer's.
            consumer = fill_consumer(hlo, ins, lambda u: hlo.attribution_of(u, ownership)[0] is not None) if (
                hlo and ins and source is None and copied is None) else None
            if consumer is not None and hlo is not None:
                source, via = hlo.attribution_of(consumer, ownership)
            # A fusion whose root XLA made has no line of its own: its fused ops' (theirs carry the user's).
            if hlo and ins and source is None and copied is None and consumer is None:
                source, via = fused_ops_source(hlo, ins, lambda op: hlo.attribution_of(op, ownership))
            live.append(LiveBuffer(
                name=name, bytes=nbytes,
                shape=list(main.dims) if main else None, dtype=main.dtype if main else None,
                op_name=op_name, source=source, via=via, copy_of=copy_of,
                filled_for=consumer.name if consumer is not None else None,
            ))
        live.sort(key=lambda b: (-b.bytes, b.name))
    timeline = _timeline(report, parse_buffer_values(buffer_assignment_text)) if (
        report and buffer_assignment_text
    ) else []
    return MemorySummary(
        platform=platform,
        peak_bytes=stats.peak_bytes,
        argument_bytes=stats.argument_bytes,
        output_bytes=stats.output_bytes,
        temp_bytes=stats.temp_bytes,
        alias_bytes=stats.alias_bytes,
        generated_code_bytes=stats.generated_code_bytes,
        budget_bytes=budget_bytes,
        headroom_bytes=(budget_bytes - stats.peak_bytes) if budget_bytes is not None else None,
        live_range_peak_bytes=report.peak_bytes if report else None,
        peak_step=report.peak_step if report else None,
        live_at_peak=live,
        timeline=timeline,
    )


_ALLOCATION_LINE = re.compile(r"^allocation \d+: size (\d+), (.*)$", re.M)


# An allocation in another memory than the device's main one: "color 1" (TPU VMEM), "color 2" (SMEM).
# memory_analysis() counts colour 0 alone; adding VMEM's scratch put a dump's figure 6.9-17% above it.
_OTHER_MEMORY = re.compile(r"\bcolor [1-9]\d*\b")


def stats_from_buffer_assignment(text: str) -> MemoryStats:
    """``memory_analysis()``'s figures rebuilt from a buffer-assignment report, for
    compiled HLO checked in without its executable: parameters are arguments (and,
    when they may be live out, aliased outputs), output and live-out allocations
    are outputs, the preallocated temp is the temp."""
    arg = out = temp = alias = 0
    if not _ALLOCATION_LINE.search(text):
        # Every compiled program has at least its parameters' allocations: a
        # report with none is damaged, and would otherwise read as a 0 B peak.
        raise MalformedReport("not an XLA buffer-assignment report: no 'allocation N: size S, ...' line")
    for m in _ALLOCATION_LINE.finditer(text):
        size, rest = int(m.group(1)), m.group(2)
        if _OTHER_MEMORY.search(rest):  # a TPU's on-chip memories (VMEM, SMEM): not the device memory
            continue
        if "parameter" in rest:
            arg += size
            if "maybe-live-out" in rest:
                alias += size
                out += size
        elif "preallocated-temp" in rest:
            temp += size
        elif "output shape" in rest or ("maybe-live-out" in rest and "constant" not in rest):
            out += size
    return MemoryStats(argument_bytes=arg, output_bytes=out, temp_bytes=temp, alias_bytes=alias)
