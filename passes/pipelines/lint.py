"""The lint pipeline: one explicit, ordered function from a target's StableHLO
module and compiled facts to its report (``LINT``'s stages, each run through the
pass manager so a failure names its pass).

Order matters and is written out rather than registered: the signature feeds
collective axis mapping, the collectives and memory feed the rules, and the
rules see the compiled (not the requested) output shardings. The propagation
behind a finding's provenance runs last, and only when a finding asks for it.
A target the compiler refused for want of memory has a shorter pipeline
(``LINT_REFUSED``): no compiled program, the refusal its finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxlib.mlir import ir

from ..common.device_groups import MeshInfo, axis_scopes
from ..common.shapes import parse_arrays
from ..hlo.attention_sums import attention_inputs
from ..hlo.collective_intent import classify, parameters, partial_sum_operands
from ..hlo.collective_origin import at_out_shardings, collective_origins
from ..hlo.collective_parameter import collective_parameters, sliced_partial_sums
from ..hlo.collectives import find_collectives
from ..hlo.combined_parts import CombinedParts, traced_parts
from ..hlo.compiler_refusal import CompilerRefusal, read_refusal
from ..hlo.cost import program_cost, xla_cost_figures
from ..hlo.error_paths import mark_error_paths
from ..hlo.gather_readers import gather_readers
from ..hlo.involuntary_remat import locate_remats, read_involuntary_remats
from ..hlo.layout_waste import aliased_parameters
from ..hlo.member_copies import mark_member_copies
from ..hlo.memory import summarize_memory
from ..hlo.module import HloModule
from ..hlo.normalized_sums import normalized_partial_sums
from ..hlo.pair_partners import pair_partners
from ..hlo.parser import parse_hlo_module
from ..hlo.step_time import estimate_step_time
from ..hlo.tensor_parallel_pairs import mark_row_parallel_sums, row_parallel_sums
from ..models.entry import EntrySignature, RoundTrip
from ..models.report import Collective, Finding, MemorySummary, SourceLocation, StepTime, TargetReport, TensorInfo
from ..propagation.callback_splits import with_split_arguments
from ..propagation.predicted_communication import predict
from ..propagation.report import run_propagation
from ..propagation.split_slices import split_slice_collectives
from ..rules.context import RuleContext
from ..rules.finding_provenance import ConflictCheck as ConflictCheck  # the analyzer's, re-exported
from ..rules.finding_provenance import attach_provenance, explained
from ..rules.table import RULES, codes_where
from ..source.frames import CodeOwnership
from ..stablehlo.module import (
    EntrySources,
    call_site,
    per_device_bytes,
    read_entry_signature,
    read_entry_sources,
)
from ..stablehlo.sharding_constraints import read_constraints
from ..stablehlo.state_roundtrip import correspond, suggested_out_shardings
from ..stablehlo.stated_moves import mark_stated_moves, stated_moves
from .catalogue import REMATERIALIZATION_RULES
from .entry import entry_signature
from .inputs import CompiledFacts, PassConfig
from .pass_manager import Pipeline
from .propagated_facts import activation_splits, batch_dims, constrained_padding, propagated_padding
from .rule_stage import rule_context, run_rule, run_rules


def _with_shardings(tensors: tuple[TensorInfo, ...], shardings: tuple[list[list[str]] | None, ...] | None,
                    mesh: MeshInfo) -> tuple[TensorInfo, ...]:
    """The tensors with the compiled shardings where the compiler reported one."""
    if shardings is None:
        return tuple(tensors)
    padded = list(shardings) + [None] * (len(tensors) - len(shardings))
    return tuple(
        t if s is None else t.model_copy(update={
            "sharding": s, "per_device_bytes": per_device_bytes(t.shape, t.dtype, s, mesh)})
        for t, s in zip(tensors, padded)
    )


# Builds and checks the out_shardings= text from the program's real pytrees, which
# only the analyzer has: (inputs, outputs, round trips) -> (text, why there is none).
OutShardingsHook = Callable[[tuple[TensorInfo, ...], tuple[TensorInfo, ...], tuple[RoundTrip, ...]],
                            "tuple[str | None, str | None]"]

LINT = Pipeline("lint", (
    "entry-signature", "hlo-parse", "collectives", "memory", "state-roundtrips", "per-member-copies",
    "collective-intent", "collective-origin", "row-parallel-sums", "combined-parts", "step-time", "call-site",
    "rule-facts", "rules", "compiled-program-passes", "report-notes", "out-shardings", "provenance",
), reads={
    "entry-signature": (),
    "hlo-parse": (),
    "collectives": ("entry-signature", "hlo-parse"),  # the mesh's axes
    "memory": ("hlo-parse",),
    "state-roundtrips": ("entry-signature",),
    "per-member-copies": ("entry-signature", "hlo-parse", "memory", "state-roundtrips"),
    # Each pass over the collectives reads the one before it's: intent, origin, pairs, parts, times, site.
    "collective-intent": ("entry-signature", "hlo-parse", "collectives", "state-roundtrips"),
    "collective-origin": ("entry-signature", "hlo-parse", "collective-intent"),
    "row-parallel-sums": ("entry-signature", "hlo-parse", "state-roundtrips", "collective-origin"),
    "combined-parts": ("entry-signature", "hlo-parse", "state-roundtrips", "row-parallel-sums"),
    "step-time": ("hlo-parse", "combined-parts"),
    "call-site": ("entry-signature", "hlo-parse", "step-time"),
    "rule-facts": ("entry-signature", "hlo-parse", "per-member-copies", "state-roundtrips", "combined-parts",
                   "call-site"),
    # Without the rules' context (a fix candidate's check), SL104's own, from the collectives timed.
    "rules": ("entry-signature", "hlo-parse", "per-member-copies", "state-roundtrips", "step-time", "rule-facts"),
    "compiled-program-passes": ("entry-signature", "hlo-parse", "call-site", "rules"),
    "report-notes": ("rule-facts",),
    "out-shardings": ("entry-signature", "state-roundtrips"),
    "provenance": ("entry-signature", "per-member-copies", "step-time", "call-site", "rule-facts",
                   "compiled-program-passes", "report-notes", "out-shardings"),
})
LINT_REFUSED = Pipeline("lint-refused", ("entry-signature", "refusal", "state-roundtrips", "rules"), reads={
    "entry-signature": (), "refusal": (), "state-roundtrips": ("entry-signature",),
    "rules": ("entry-signature", "refusal", "state-roundtrips"),
})

# The rules that read Shardy's propagation of the module (their traits say so): it runs when one is on.
# The rules whose findings can stand for a collective XLA adds at an output (SL201 claims it): their traits.
_BOUNDARY_COLLECTIVES = codes_where(lambda t: t.boundary_collectives)


def read_entry(module: ir.Module, ownership: CodeOwnership) -> tuple[EntrySignature, EntrySources]:
    """Stage 1: the entry signature and its source lines, from StableHLO (the analyzer runs it on a copy of
    the module, on another thread while XLA compiles, and hands it to ``analyze_target`` as ``entry``)."""
    return LINT.run("entry-signature", _read_entry, module, ownership)


def _read_entry(module: ir.Module, ownership: CodeOwnership) -> tuple[EntrySignature, EntrySources]:
    return read_entry_signature(module), read_entry_sources(module, ownership)


def program_call_site(module: ir.Module, program_name: str, ownership: CodeOwnership) -> SourceLocation | None:
    """The user's line that called the jitted function ``program_name`` was traced from (the report's
    call site; ``run`` names its dumped programs' by their own names)."""
    return LINT.run("call-site", call_site, module, program_name, ownership)


def analyze_target(
    name: str, module: ir.Module, compiled: CompiledFacts, config: PassConfig,
    out_shardings_hook: OutShardingsHook | None = None,
    entry: tuple[EntrySignature, EntrySources] | None = None,
    explain_with: ir.Module | None = None, display: Callable[[SourceLocation], str] = str,
    with_rules: bool = True, meets: ConflictCheck | None = None,
) -> TargetReport:
    """``entry``: the entry signature and sources when already read (from a copy
    of the module, on another thread while XLA compiled). ``explain_with``: a copy of
    the module (in a context of its own) to propagate shardings over when a finding
    asks for its provenance; ``display`` writes a source line in its chain; ``meets``: whether an argument's
    sharding takes part in a finding's collectives (finding_provenance.ConflictCheck). Without
    ``with_rules`` the report has the program's figures (memory, collectives, step time,
    inputs and outputs) and no findings but SL104's, whatever the configuration disables (XLA's
    rematerializations): what a fix candidate's check and suggest's versions read."""
    # The entry signature and its source lines, from StableHLO.
    sig, sources = entry or read_entry(module, config.ownership)
    inputs = _with_shardings(sig.inputs, compiled.input_shardings, sig.mesh)
    if compiled.donated_inputs:  # jit leaves a donation no output matches out of the module: the user's still
        inputs = tuple(t.model_copy(update={"donated": True}) if t.index in compiled.donated_inputs else t
                       for t in inputs)
    outputs = _with_shardings(sig.outputs, compiled.output_shardings, sig.mesh)
    sig_compiled = dataclasses.replace(sig, inputs=inputs, outputs=outputs)

    # The compiled program: collectives and memory.
    hlo = LINT.run("hlo-parse", parse_hlo_module, compiled.hlo_text)
    collectives = LINT.run("collectives", find_collectives, hlo, sig.mesh, compiled.device_processes,
                           config.ownership, config.loop_trips).collectives
    memory = LINT.run("memory", summarize_memory,
                      compiled.memory, compiled.platform, hlo, compiled.live_range_text,
                      compiled.buffer_assignment_text, config.budget_bytes, config.ownership,
                      ) if compiled.memory else None

    # Which outputs are inputs coming back: the step's state, whose parameters'
    # gathers and gradient reductions are intended traffic.
    roundtrips = LINT.run("state-roundtrips", correspond, sig_compiled)
    memory = LINT.run("per-member-copies", mark_member_copies, memory, parameters(inputs, roundtrips), sig.mesh,
                      hlo)
    collectives = LINT.run("collective-intent", _intents, collectives, hlo, parameters(inputs, roundtrips), sig.mesh,
                           module, config.ownership, inputs)
    collectives = LINT.run("collective-origin", collective_origins, hlo, collectives, inputs, config.ownership,
                           config.where)
    collectives = LINT.run("row-parallel-sums", mark_row_parallel_sums, hlo, collectives,
                          parameters(inputs, roundtrips))
    collectives, combined = LINT.run("combined-parts", traced_parts, hlo, collectives, inputs,
                                     parameters(inputs, roundtrips), sig.mesh, config.ownership, config.where)
    time, collectives = LINT.run("step-time", timed_collectives, hlo, collectives, config, compiled.xla_cost)

    if not with_rules:
        # SL104's findings alone: XLA's word that it replicates a value, which a fix check reads (a candidate
        # compiled with a rematerialization the program as written lacks is not better).
        remats = read_involuntary_remats(compiled.compiler_warnings, sig.mesh)
        remat_ctx = rule_context(
            name, compiled.platform, sig_compiled, config, inputs=inputs, outputs=outputs, sources=sources,
            collectives=collectives, memory=memory, roundtrips=roundtrips,
            involuntary_remats=locate_remats(hlo, remats, collectives, config.ownership)) if remats else None
        remat_findings = [f for code in REMATERIALIZATION_RULES if remat_ctx is not None
                          for f in LINT.run("rules", run_rule, remat_ctx, config, code)]
        return TargetReport(
            name=name, platform=compiled.platform,
            num_devices=sig.mesh.size if sig.mesh.axes else sig.num_partitions, mesh=dict(sig.mesh.axes),
            memory=memory, collectives=list(collectives), inputs=list(inputs), outputs=list(outputs),
            findings=remat_findings,
            axis_scope=axis_scopes(sig.mesh, compiled.device_processes) if compiled.device_processes else {},
            time=time,
        )

    # The jit call's line, and the collectives XLA inserts to meet its out_shardings located there.
    site, collectives = LINT.run("call-site", _call_site_and_its_collectives, module, config, hlo, collectives,
                                 sig_compiled.outputs, _stated_outputs(sig))

    # Rules.
    ctx = LINT.run("rule-facts", _rule_facts, name, module, compiled, config, sig, sig_compiled, sources, hlo,
                   collectives, memory, roundtrips, site, combined)
    findings = LINT.run("rules", run_rules, ctx, config)
    findings = LINT.run("compiled-program-passes", _compiled_program_passes, hlo, findings, outputs, collectives)
    warnings = LINT.run("report-notes", _report_notes, ctx, config)
    if out_shardings_hook is not None:
        suggestion, problem = LINT.run("out-shardings", out_shardings_hook, inputs, outputs, roundtrips)
        if problem:
            warnings.append(problem)
    else:
        suggestion = LINT.run("out-shardings", suggested_out_shardings, outputs, roundtrips)
    report = TargetReport(
        name=name, platform=compiled.platform, num_devices=ctx.num_devices, mesh=dict(sig.mesh.axes),
        memory=memory, collectives=list(collectives), inputs=list(inputs), outputs=list(outputs),
        findings=findings, suggested_out_shardings=suggestion, warnings=warnings,
        axis_scope=axis_scopes(sig.mesh, compiled.device_processes) if compiled.device_processes else {},
        time=time,
    )
    # Why: the propagation behind an explained finding's provenance.
    if explain_with is not None and explained(report.findings):
        report = LINT.run("provenance", _with_provenance, report, explain_with, config.ownership, display, meets)
    return report


def _intents(collectives: tuple[Collective, ...], hlo: HloModule, params: tuple[TensorInfo, ...], mesh: MeshInfo,
             module: ir.Module, ownership: CodeOwnership, inputs: tuple[TensorInfo, ...] = (),
             ) -> tuple[Collective, ...]:
    """Each collective's intent; a move between two layouts the program's constraints state is its own, and a
    read of one slice along a dimension an argument's split reaches is resharding (whatever its shape)."""
    moves = stated_moves(module, ownership)
    own = {c.hlo_name: hlo.attribution_of(ins, ownership) for c in collectives
           if moves and (ins := hlo.instruction(c.hlo_name)) is not None}
    marked = mark_stated_moves(classify(collectives, hlo, params, mesh), moves, own)
    split = split_slice_collectives(marked, hlo, module, inputs, ownership) if mesh.axes else marked
    # A collective only a failing runtime check runs (equinox's error_if) is no step's traffic (error_paths.py).
    return mark_error_paths(split, hlo)


def _compiled_program_passes(hlo: HloModule, findings: list[Finding], outputs: tuple[TensorInfo, ...],
                             collectives: tuple[Collective, ...]) -> list[Finding]:
    """Each rule's pass over the compiled program with every finding (its ``compiled_program_pass`` trait:
    SL201 explains its outputs by their resharding and claims the collectives XLA adds where they leave), in
    code order."""
    for code in sorted(RULES):
        if (program_pass := RULES[code].traits.compiled_program_pass) is not None:
            findings = program_pass(hlo, findings, outputs, collectives, _BOUNDARY_COLLECTIVES)
    return findings


def _report_notes(ctx: RuleContext, config: PassConfig) -> list[str]:
    """The report's warnings the rules on add (their ``report_note`` trait: SL105's small reshards no rule
    reports), in code order."""
    return [note for code in sorted(RULES) if code not in config.disabled
            and (report_note := RULES[code].traits.report_note) is not None and (note := report_note(ctx))]


def _call_site(module: ir.Module, config: PassConfig) -> SourceLocation | None:
    attrs = module.operation.attributes
    name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else None
    return call_site(module, name, config.ownership) if name else None


def _stated_outputs(sig: EntrySignature) -> frozenset[int]:
    """The outputs whose layout the jit call states (out_shardings): the module gives them a sharding."""
    return frozenset(t.index for t in sig.outputs if t.sharding is not None)


def _call_site_and_its_collectives(module: ir.Module, config: PassConfig, hlo: HloModule,
                                   collectives: tuple[Collective, ...], outputs: tuple[TensorInfo, ...],
                                   stated: frozenset[int]) -> tuple[SourceLocation | None, tuple[Collective, ...]]:
    """The jit call's line, and the collectives with those XLA inserts to return an output on the layout its
    out_shardings states located at that line (collective_origin.at_out_shardings): a finding about one is
    the user's line that asks for it, as SL201's and SL202's are."""
    site = _call_site(module, config)
    return site, at_out_shardings(hlo, collectives, outputs, stated, site)


def _rule_facts(name: str, module: ir.Module, compiled: CompiledFacts, config: PassConfig, sig: EntrySignature,
                sig_compiled: EntrySignature, sources: EntrySources, hlo: HloModule,
                collectives: tuple[Collective, ...], memory: MemorySummary | None,
                roundtrips: tuple[RoundTrip, ...], site: SourceLocation | None,
                combined: CombinedParts | None = None) -> RuleContext:
    """What the rules read beyond the signature, collectives and memory, and the context they read it in.
    The collectives' facts are also found for each part of a combined reduction, traced alone (``combined``)."""
    inputs, outputs = sig_compiled.inputs, sig_compiled.outputs
    traced, traced_hlo = (collectives + combined.collectives, combined.module) if combined else (collectives, hlo)
    sharded = frozenset(
        (t.dtype, tuple(t.shape)) for t in (*inputs, *outputs) if t.sharding and any(t.sharding)
    )
    return rule_context(
        name, compiled.platform, sig_compiled, config, inputs=inputs, outputs=outputs, sources=sources,
        collectives=collectives, memory=memory, roundtrips=roundtrips,
        sharded_global_shapes=sharded, partial_sum_operands=partial_sum_operands(traced, traced_hlo),
        collective_parameters=collective_parameters(traced_hlo, traced, inputs, sig.mesh),
        sliced_partial_sums=sliced_partial_sums(traced_hlo, traced), gather_readers=gather_readers(hlo, collectives),
        normalized_partial_sums=normalized_partial_sums(traced_hlo, traced),
        attention_inputs=attention_inputs(traced_hlo, traced),
        row_parallel_sums=row_parallel_sums(traced_hlo, traced, parameters(inputs, roundtrips)),
        pair_partners=pair_partners(traced_hlo, traced, inputs, sig.mesh),
        collective_parts=combined.parts if combined else {},
        involuntary_remats=with_split_arguments(locate_remats(
            hlo, read_involuntary_remats(compiled.compiler_warnings, sig.mesh), collectives, config.ownership),
            module, inputs, config.ownership),
        padded_values=constrained_padding(module, sig, hlo, config),
        constraints=read_constraints(module, config.ownership),
        propagated_padding=propagated_padding(module, sig, hlo, config),
        split_reads=activation_splits(module, sig, collectives, config),
        argument_batch_dims=batch_dims(module, sig, collectives, config),
        donated_inputs=frozenset(t.index for t in inputs if t.donated),
        stated_outputs=_stated_outputs(sig),
        call_site=site,
        aliased_inputs=aliased_parameters(hlo),
    )


def _with_provenance(report: TargetReport, module: ir.Module, ownership: CodeOwnership,
                     display: Callable[[SourceLocation], str], meets: ConflictCheck | None = None) -> TargetReport:
    """Our propagation and its predicted communication, run only when a finding asks
    for its provenance. (It once ran beside every compile, on the second core: XLA's
    CPU compile uses more than one, and the propagation slowed it by 10-20% on the
    scale benchmark's clean programs, which never read it.)"""
    try:
        propagated = run_propagation(module, ownership)
        predicted = predict(propagated.graph)
    except Exception as e:  # noqa: BLE001 - an op our propagation cannot follow costs the findings their
        # provenance, never the lint; said, not silent (a diffrax step's call graph stopped it unseen, newbie16).
        said = (f"the propagation that gives the findings their why: lines stopped ({type(e).__name__}: {e}), so "
                "they lack the lines it gives; the findings and figures stand (this is the tool's bug: propagate "
                "--debug on the same target shows where)")
        return report.model_copy(update={"warnings": [*report.warnings, said]})
    return attach_provenance(report, propagated, display, predicted, meets)


def analyze_refused_target(
    name: str, module: ir.Module, refusal: CompilerRefusal, platform: str, config: PassConfig,
    entry: tuple[EntrySignature, EntrySources] | None = None,
) -> TargetReport:
    """A target the compiler refused for want of memory: no compiled program, so no collectives or
    memory summary; the refusal is the over-budget finding, and what the StableHLO alone shows
    (shardings of arguments and results, donation) is checked as usual."""
    sig, sources = entry or LINT_REFUSED.run("entry-signature", _read_entry, module, config.ownership)
    ctx = rule_context(
        name, platform, sig, config, inputs=sig.inputs, outputs=sig.outputs, sources=sources, collectives=(),
        memory=None, roundtrips=LINT_REFUSED.run("state-roundtrips", correspond, sig), refusal=refusal,
    )
    return TargetReport(
        name=name, platform=platform, num_devices=ctx.num_devices, mesh=dict(sig.mesh.axes), memory=None,
        collectives=[], inputs=list(sig.inputs), outputs=list(sig.outputs),
        findings=LINT_REFUSED.run("rules", run_rules, ctx, config),
        warnings=["not compiled: the compiler refused it for want of memory (SL301), so there are no collectives "
                  "and no memory breakdown"],
    )


def refusal_of(error_text: str) -> CompilerRefusal | None:
    """The compiler's out-of-memory refusal in a compile error's text (lint's refused pipeline starts from
    it), or None for any other error."""
    return LINT_REFUSED.run("refusal", read_refusal, error_text)


def timed_collectives(hlo: HloModule, collectives: tuple[Collective, ...] | list[Collective], config: PassConfig,
                      xla_cost: dict[str, Any] | None) -> tuple[StepTime | None, tuple[Collective, ...]]:
    """The estimate and the collectives with their times, slowest first (as they
    were when there is no device model)."""
    if config.device_spec is None:
        return None, tuple(collectives)
    time, timed = estimate_step_time(program_cost(hlo, config.loop_trips), collectives, config.device_spec,
                                     xla_cost_figures(xla_cost))
    return time, tuple(timed)


def replicated_outputs(module: ir.Module, hlo_text: str) -> tuple[list[list[str]] | None, ...] | None:
    """The outputs a jit without out_shardings left to XLA (no sharding in the module) that the compiled
    program returns whole on every device: their per-device shape, the dumped HLO's, is the global one.
    lint reads every output's sharding from the executable; a dump names none, so without this each was
    unknown and SL202 matched no output to a replicated input (a Llama step jit'ed without donation had no
    SL202 under run). An output XLA shards stays unknown: its per-device shape does not say over which axes."""
    outputs = entry_signature(module, LINT).outputs
    root = next((i for i in parse_hlo_module(hlo_text).entry_computation.instructions if i.is_root), None)
    local = parse_arrays(root.shape) if root is not None else []
    if len(local) != len(outputs):
        return None
    return tuple([[] for _ in t.shape] if t.sharding is None and list(a.dims) == list(t.shape) else None
                 for t, a in zip(outputs, local))
