"""SL201 output-sharding-mismatch: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from collections.abc import Iterable

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import named_sharding_text, pspec_text
from ..hlo.collective_origin import outputs_depending_on
from ..hlo.module import HloModule
from ..models.report import Collective, Finding, Severity, TensorInfo
from ..models.rule_codes import SL201
from ..stablehlo.state_roundtrip import mismatched
from .context import RuleContext
from .registry import Emitter, OptionKind, Provenance, RuleOption, RuleTraits, define_rule

OUTPUT_MISMATCH_MIN_BYTES = RuleOption(
    "output-mismatch-min-bytes", 1024**2, OptionKind.bytes,
    "per-device size from which each mismatched output is its own finding; smaller ones are "
    "reported together in one finding")


def output_sharding_mismatch(ctx: RuleContext, out: Emitter) -> None:
    """A step's state comes back on another layout than it went in.

    What it does
    ------------
    Pairs each output with the input it corresponds to (by pytree path, or by
    position with equal shape and dtype where the structures differ) and reports
    a pair whose compiled output sharding differs from the input's sharding.
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
        out.emit(
            f"output {rt.output.path} comes back as {pspec_text(rt.output.sharding)} but its input "
            f"{rt.input.path} is {pspec_text(rt.input.sharding)}: the next step reshards "
            f"{format_bytes(rt.output.per_device_bytes)} per device ({format_bytes(rt.output.bytes)} global) on entry"
            f"{'; out_shardings states ' + pspec_text(rt.output.sharding) + ' for it' if stated else ''}",
            ctx.call_site if stated else ctx.output_source(rt.output.index),
            fix=f"pin it with out_shardings: {rt.output.path} -> {named_sharding_text(rt.input.sharding)} "
            "(the target's suggested out_shardings= pins every state output)",
            subject=rt.output.path, parameter=rt.input,
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
        noun = "output comes" if len(small) == 1 else "small outputs come"
        out.emit(
            f"{len(small)} {noun} back on another layout than their inputs ({span} per device each, under "
            f"{format_bytes(floor)}): {shown}{more}",
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


RULE = define_rule(SL201, Severity.warning, output_sharding_mismatch,
                   options=(OUTPUT_MISMATCH_MIN_BYTES,),
                   traits=RuleTraits(provenance=Provenance.output_layout, argument_layout=True, about_state=True))
