"""What pinning output shardings changed: collectives added, removed or changed,
the peak and its parts, and an honest verdict on whether the cost went away."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Literal

from ..common.axes import axes_text
from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..hlo.collective_origin import pinned_output
from ..models.entry import RoundTrip
from ..models.report import Collective, SourceLocation, TargetReport
from ..models.rewrite import AppliedSharding, CollectiveChange, ProgramFacts


def program_facts(report: TargetReport) -> ProgramFacts:
    m = report.memory
    return ProgramFacts(
        peak_bytes=m.peak_bytes if m else 0, argument_bytes=m.argument_bytes if m else 0,
        output_bytes=m.output_bytes if m else 0, temp_bytes=m.temp_bytes if m else 0,
        alias_bytes=m.alias_bytes if m else 0,
        collective_bytes=report.collective_bytes,
        collectives=report.collectives, outputs=report.outputs, time=report.time,
    )


# kind, mesh axes, shape, dtype, source (file, line), input path
_CollectiveKey = tuple[str, tuple[str, ...], tuple[int, ...], str, "tuple[str, int] | None", str]


def _key(c: Collective) -> _CollectiveKey:
    src = (c.source.file, c.source.line) if c.source else None
    return (c.kind, tuple(c.mesh_axes), tuple(c.shape), c.dtype, src, c.input_path or "")


def collective_changes(before: list[Collective], after: list[Collective]) -> list[CollectiveChange]:
    """Collectives matched by kind, mesh axes, shape, dtype, source line and the
    input their operand is (operand identity, where the compiled program shows
    it); bytes are per step (bytes x count), summed over matching ops."""
    b: dict[_CollectiveKey, int] = defaultdict(int)
    a: dict[_CollectiveKey, int] = defaultdict(int)
    sources = {}
    for c in before:
        b[_key(c)] += c.bytes * c.count
        sources[_key(c)] = c.source
    for c in after:
        a[_key(c)] += c.bytes * c.count
        sources[_key(c)] = c.source
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (-(max(a.get(k, 0), b.get(k, 0))), str(k))):
        before_bytes, after_bytes = b.get(key, 0), a.get(key, 0)
        if before_bytes == after_bytes:
            continue
        change: Literal["added", "removed", "changed"] = (
            "added" if not before_bytes else "removed" if not after_bytes else "changed")
        kind, axes, shape, dtype, _, _ = key
        out.append(CollectiveChange(
            change=change, kind=kind, mesh_axes=list(axes), shape=list(shape), dtype=dtype, source=sources[key],
            bytes_before=before_bytes, bytes_after=after_bytes,
        ))
    return out


def verdict(before: ProgramFacts, after: ProgramFacts, remaining: list[str]) -> str:
    dc = after.collective_bytes - before.collective_bytes
    dp = after.peak_bytes - before.peak_bytes
    parts = [
        f"collectives {format_bytes(before.collective_bytes)} -> {format_bytes(after.collective_bytes)} per step",
        f"peak {format_bytes(before.peak_bytes)} -> {format_bytes(after.peak_bytes)} per device",
    ]
    if dc < 0 and dp <= 0:
        head = "The rewrite removes communication"
    elif dc <= 0 and dp < 0:
        head = "The rewrite lowers the peak"
    elif dc > 0 or dp > 0:
        head = ("The rewrite moves the cost into this step: the outputs now leave on their input layout, so the "
                "next step no longer reshards them on entry, but this step pays for the layout")
    else:
        head = "The rewrite changes nothing this step can see"
    text = f"{head} ({'; '.join(parts)})."
    if remaining:
        text += " It cannot remove everything: see remaining."
    return text


def remaining_costs(after: TargetReport, output_layout_rules: frozenset[str],
                    display: Callable[[SourceLocation], str] = str) -> list[str]:
    """Findings that survive the rewrite and what would remove them (the findings of ``output_layout_rules``,
    about an output's layout, the rewrite was to fix); ``display`` turns a source location into text.

    Only resharding the rewrite cannot touch counts: a parameter gather or a
    gradient reduction is what the sharding asked for. A collective is blamed on
    an input only when the compiled program shows its operand is that input (or
    the gather that reads it along a sharded dimension): a backward-pass gather
    that merely shares a shape with an Adam moment is not. Identical lines are
    given once, with a count."""
    sharded = {t.path: t for t in after.inputs if t.sharding and any(t.sharding)}
    lines: dict[str, int] = {}
    pinned: dict[tuple[str, str, str, str], list[tuple[Collective, str]]] = {}
    for c in after.collectives:
        if c.intent not in (None, "reshard") or c.kind not in ("all-gather", "all-reduce") or c.group_size < 2:
            continue
        where = display(c.source) if c.source else "the program"
        if (returned := pinned_output(c)) is not None:  # the rewrite's own pins ask for it: said once per kind
            axes = axes_text(c.mesh_axes, after.mesh, ", ")
            pinned.setdefault((where, c.kind, axes, returned[1]), []).append((c, returned[0]))
            continue
        if c.kind == "all-gather" and c.input_path in sharded:
            what = f"rebuilds the whole of {c.input_path} ({format_bytes(c.bytes)}) on every device"
        elif c.why:
            what = f"runs because {c.why}"
        else:
            continue
        line = (f"{where}: {c.kind} over {axes_text(c.mesh_axes, after.mesh, ', ')} still {what}; pinning outputs "
                "cannot remove it, "
                "because an op reads along the sharded dimension: shard another axis (one the op does not read "
                "along)")
        lines[line] = lines.get(line, 0) + c.count
    out = [_inserted_for_pins(key, group) for key, group in pinned.items()]
    out += [line if n == 1 else f"{line} ({n}x per step)" for line, n in lines.items()]
    for f in after.findings:
        if f.rule in output_layout_rules:
            out.append(f"{display(f.source) if f.source else 'the program'}: {f.message}")
    return out


# The outputs a paragraph on the collectives the pins ask for names before "and N more".
_OUTPUTS_NAMED = 3


def _inserted_for_pins(key: tuple[str, str, str, str], group: list[tuple[Collective, str]]) -> str:
    """One paragraph for the collectives XLA inserts to return outputs on the layout the rewrite pinned them
    to (at_out_shardings' why): no op reads along another axis here, so no other axis removes them; they are
    what the pin costs."""
    where, kind, axes, layout = key
    count = sum(c.count for c, _ in group)
    total = sum(c.bytes * c.count for c, _ in group)
    outputs = sorted(dict.fromkeys(path for _, path in group))
    named = ", ".join(outputs[:_OUTPUTS_NAMED]) + (
        f" and {len(outputs) - _OUTPUTS_NAMED} more" if len(outputs) > _OUTPUTS_NAMED else "")
    return (f"{where}: {count} {kind}{'s' if count != 1 else ''} over {axes} ({format_bytes(total)} per step) "
            f"inserted to meet the pinned out_shardings: the step computes {len(outputs)} output"
            f"{'s' if len(outputs) != 1 else ''} {'sharded' if kind == 'all-gather' else 'as partial sums'} over "
            f"{axes} and the rewrite pins "
            f"{'them' if len(outputs) != 1 else 'it'} to {layout} ({named}); leaving "
            f"{'these outputs' if len(outputs) != 1 else 'it'} unpinned, or giving the inputs the layout the step "
            "computes them in, avoids this")


def lost_donations(before: TargetReport, after: TargetReport, applied: list[AppliedSharding],
                   roundtrips: tuple[RoundTrip, ...]) -> list[str]:
    """A pinned output whose per-device size no longer matches its donated input: XLA cannot write
    it into the donated buffer and drops the alias (it does not fail); the report says so. ``roundtrips``:
    the program as written's, with its compiled shardings."""
    if not applied or not before.memory or not after.memory or after.memory.alias_bytes >= before.memory.alias_bytes:
        return []
    input_of = {rt.output.index: rt.input for rt in roundtrips}
    out = []
    for a in applied:
        given, made = input_of.get(a.index), after.outputs[a.index]
        if given is not None and given.donated and given.per_device_bytes != made.per_device_bytes:
            out.append(f"donation: {given.path} is donated, but {a.path} on {pspec_text(a.after)} is "
                       f"{format_bytes(made.per_device_bytes)} per device where {given.path} is "
                       f"{format_bytes(given.per_device_bytes)}, so XLA cannot write it into the donated buffer "
                       f"(aliased {format_bytes(before.memory.alias_bytes)} -> "
                       f"{format_bytes(after.memory.alias_bytes)}); give the input the output's sharding to "
                       "keep the donation")
    return out
