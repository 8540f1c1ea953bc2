"""SL201 output-sharding-mismatch: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from collections.abc import Iterable

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import named_sharding_text, pspec_text
from ..hlo.collective_origin import outputs_depending_on, outputs_returning
from ..hlo.error_paths import CHECKED_VALUE_GATHER
from ..hlo.module import HloModule
from ..models.report import Collective, Finding, Severity, TensorInfo
from ..models.rule_codes import SL201, SL205
from ..stablehlo.state_roundtrip import SUFFIX, mismatched
from .context import RuleContext
from .registry import Emitter, OptionKind, Provenance, RuleOption, RuleTraits, define_rule

OUTPUT_MISMATCH_MIN_BYTES = RuleOption(
    "output-mismatch-min-bytes", 1024**2, OptionKind.bytes,
    "per-device size from which each mismatched output is its own finding; smaller ones are "
    "reported together in one finding")


# An output paired with an input by its key path below the argument only (result[1].w with params.w): the
# gradients of a (loss, grads) step pair so, and are never fed back; the finding says what it assumed.
_IF_FED_BACK = ("if the caller feeds it back as that input (a state returned updated; gradients, which are not fed "
                "back, need nothing)")

# How the one finding for many small outputs reads after their count (is_small_outputs_group).
_SMALL_OUTPUTS = "small outputs come"


def output_sharding_mismatch(ctx: RuleContext, out: Emitter) -> None:
    """A step's state comes back on another layout than it went in.

    What it does
    ------------
    Pairs each output with the input it corresponds to (by pytree path, or by
    position with equal shape and dtype where the structures differ) and reports
    a pair whose compiled output sharding differs from the input's sharding.
    An output paired only by its key path below the argument (`result[1].w`
    with `params.w`: the gradients of a `(loss, grads)` step pair so too) is
    reported as resharding only if the caller feeds it back.
    Pairs under `output-mismatch-min-bytes` per device (norm scales, biases and
    their optimizer moments) are reported together, as one finding.

    Why is this bad
    ---------------
    Without `out_shardings`, XLA picks the output layout that is cheapest for
    this step alone. The next call of the step was lowered for the input
    layout, so every step starts by resharding its own state: collectives and
    temporary memory that appear nowhere in the source.

    Example
    -------
    ```python
    step = jax.jit(train_step)           # no out_shardings
    for batch in data:
        state = step(state, batch)       # state['w'] in as P('data', 'model'),
                                         # out as P('model')
    ```

    Fix
    ---
    Pin the outputs to the input layout: `jax.jit(train_step,
    out_shardings=...)` with the text this rule prints, or run
    `jax-shard-lint rewrite` to apply and validate it.
    """
    pairs = mismatched(ctx.roundtrips)
    floor = ctx.option(OUTPUT_MISMATCH_MIN_BYTES)
    small = [rt for rt in pairs if max(rt.output.per_device_bytes, rt.input.per_device_bytes) < floor]
    small_outputs = {rt.output.index for rt in small}
    for rt in pairs:
        if rt.output.index in small_outputs:
            continue
        stated = rt.output.index in ctx.stated_outputs and ctx.call_site is not None
        reshards = (f"reshards {format_bytes(rt.output.per_device_bytes)} per device "
                    f"({format_bytes(rt.output.bytes)} global) on entry")
        comes_back = (
            f"output {rt.output.path} comes back as {pspec_text(rt.output.sharding)}; {rt.input.path}, the input "
            f"with its shape and key path, is {pspec_text(rt.input.sharding)}: {_IF_FED_BACK}, the next step "
            f"{reshards}" if rt.matched_by == SUFFIX else
            f"output {rt.output.path} comes back as {pspec_text(rt.output.sharding)} but its input "
            f"{rt.input.path} is {pspec_text(rt.input.sharding)}: the next step {reshards}")
        out.emit(
            comes_back +
            f"{'; out_shardings states ' + pspec_text(rt.output.sharding) + ' for it' if stated else ''}",
            ctx.call_site if stated else ctx.output_source(rt.output.index),
            fix=f"pin it with out_shardings: {rt.output.path} -> {named_sharding_text(rt.input.sharding)} "
            "(the target's suggested out_shardings= pins every state output)",
            subject=rt.output.path, parameter=rt.input, total_bytes=rt.output.per_device_bytes,
        )
    if small:
        # Many small outputs (norm scales, biases and their optimizer moments) are one
        # decision, and one finding, so the large state that reshards stands out.
        small.sort(key=lambda rt: (-rt.output.per_device_bytes, rt.output.index))
        sizes = sorted(rt.output.per_device_bytes for rt in small)
        shown = ", ".join(f"{rt.output.path} ({pspec_text(rt.output.sharding)}, input "
                          f"{pspec_text(rt.input.sharding)})" for rt in small[:3])
        more = f" and {len(small) - 3} more" if len(small) > 3 else ""
        span = (format_bytes(sizes[0]) if sizes[0] == sizes[-1]
                else f"{format_bytes(sizes[0])} to {format_bytes(sizes[-1])}")
        noun = "output comes" if len(small) == 1 else _SMALL_OUTPUTS
        by_suffix = all(rt.matched_by == SUFFIX for rt in small)
        out.emit(
            f"{len(small)} {noun} back on another layout than their inputs ({span} per device each, under "
            f"{format_bytes(floor)}): {shown}{more}"
            + (f" (each the input with its shape and key path: {_IF_FED_BACK}, the next step reshards it on entry)"
               if by_suffix else ""),
            ctx.output_source(small[0].output.index),
            fix="pin them with the target's suggested out_shardings= (it pins every state output)",
            subject=small[0].output.path, count=len(small), ops=[rt.output.path for rt in small],
            total_bytes=sum(rt.output.per_device_bytes for rt in small),
        )


def explain_outputs(module: HloModule, findings: Iterable[Finding], outputs: tuple[TensorInfo, ...],
                    collectives: Iterable[Collective]) -> list[Finding]:
    """This rule's findings with the resharding collectives their output depends on in the compiled
    program, and why each runs, as the first lines of their ``why`` (the pipeline's step after the rules:
    the other rules' findings pass through)."""
    findings = list(findings)
    with_why = {c.hlo_name: c for c in collectives if c.why and c.intent in (None, "reshard")}
    if not with_why:
        return findings
    by_path = {t.path: t.index for t in outputs}
    if not any(f.rule == SL201.code for f in findings):
        return list(findings)
    depends = outputs_depending_on(module, sorted(with_why))
    # A collective every one of several findings' outputs depends on (the whole gradient computation's)
    # tells none of them apart: its line would repeat on each; it stays in the report's collectives.
    named = [set(depends.get(by_path[f.subject], []))
             for f in findings if f.rule == SL201.code and f.subject is not None and f.subject in by_path]
    everyone = set.intersection(*named) if len(named) > 1 else set()
    out = []
    for f in findings:
        index = by_path.get(f.subject or "") if f.rule == SL201.code else None
        names = [n for n in depends.get(index, []) if n not in everyone] if index is not None else []
        lines = [f"it depends on the {with_why[n].kind} over {', '.join(with_why[n].mesh_axes)}: {with_why[n].why}"
                 for n in names[:2]]
        out.append(f.model_copy(update={"provenance": lines + list(f.provenance)}) if lines else f)
    return out


def is_small_outputs_group(f: Finding) -> bool:
    """This rule's one finding for many small outputs (it names no parameter: none is its cause alone)."""
    return f.count > 1 and f.parameter is None and f.message.startswith(f"{f.count} {_SMALL_OUTPUTS}")


# SL201's steps after the rules (the lint pipeline runs them).
#
# The collectives XLA adds where an output leaves the program on another layout
# are the SL201 finding's, not a second finding's.
#
# An output pinned (or propagated) to another sharding than the one the program
# computes it in is moved at the program's end by a collective with no source
# line (XLA adds it at the boundary): an all-gather of the state onto fewer axes,
# say. SL101 or SL105 (the rules whose traits say ``boundary_collectives``)
# would report that collective as a finding of its own with no line and no
# argument, beside the SL201 finding that names the output, its input and the
# fix. The SL201 finding stands for it (in its ``ops``); the
# collective is not reported twice. An SL201 finding that stands for several
# outputs (a parameter and its optimizer moments, every layer's weight) claims the
# collectives of each; an SL101 group of boundary collectives of which only some
# are claimed keeps the others.


def claim_output_reshards(module: HloModule, findings: list[Finding], outputs: tuple[TensorInfo, ...],
                          collectives: Iterable[Collective], claimable: frozenset[str]) -> list[Finding]:
    """The findings with the collectives XLA adds where an output leaves on another layout claimed by the
    SL201 finding about that output (``claimable``: the codes whose traits say ``boundary_collectives``,
    read from the table by the lint pipeline)."""
    index = {t.path: t.index for t in outputs}
    state = [f for f in findings if f.rule == SL201.code and f.subject]
    reshards = {c.hlo_name: c for c in collectives if c.intent == "reshard"}
    # And a gather equinox's error_if makes of the value it checks (error_paths.py): an output that depends on
    # it comes back whole because of it, and pinning that output is what the SL201 finding checks.
    at_boundary = sorted(n for n, c in reshards.items()
                         if c.source is None or (c.why or "").startswith(CHECKED_VALUE_GATHER))
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
        if f.rule in claimable:
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


# One finding for a donated state value that comes back on another sharding.
#
# jit drops the donation of an input whose output comes back on another sharding
# (its per-device buffer differs), so such a value is both an output that comes
# back on another layout (SL201) and a donation no output reuses (SL205). It is
# one cause with one fix, pinning the output to the input's layout, which also
# gives XLA the donated buffer back: the SL201 finding says both, and the SL205
# finding of that parameter is not printed a second time. With SL201 ignored,
# SL205 stands alone.


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


def over_compiled_program(module: HloModule, findings: list[Finding], outputs: tuple[TensorInfo, ...],
                          collectives: Iterable[Collective], claimable: frozenset[str]) -> list[Finding]:
    """The lint pipeline's pass over the compiled program after the rules: this rule's findings with the
    resharding their output depends on (explain_outputs), then the collectives XLA adds where an output
    leaves claimed by them (claim_output_reshards)."""
    explained = explain_outputs(module, findings, outputs, collectives)
    return claim_output_reshards(module, explained, outputs, collectives, claimable)


RULE = define_rule(SL201, Severity.warning, output_sharding_mismatch,
                   options=(OUTPUT_MISMATCH_MIN_BYTES,),
                   traits=RuleTraits(provenance=Provenance.output_layout, argument_layout=True, about_state=True,
                                     about_output_layout=True, group_without_own_fix=is_small_outputs_group,
                                     merge_findings=merge_lost_donations, compiled_program_pass=over_compiled_program))
