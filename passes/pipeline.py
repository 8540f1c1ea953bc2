"""The pass pipeline: one explicit, ordered function from a target's StableHLO
module and compiled facts to its report.

Order matters and is written out rather than registered: the signature feeds
collective axis mapping, the collectives and memory feed the rules, and the
rules see the compiled (not the requested) output shardings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jaxlib.mlir import ir

from .common.device_groups import MeshInfo, axis_scopes
from .common.shapes import array_bytes, parse_arrays, split_tuple
from .hlo.collective_intent import classify, parameters, partial_sum_operands
from .hlo.collective_origin import collective_origins, explain_outputs
from .hlo.collective_parameter import collective_parameters
from .hlo.collectives import find_collectives
from .hlo.compiler_refusal import CompilerRefusal
from .hlo.cost import program_cost, xla_cost_figures
from .hlo.involuntary_remat import locate_remats, read_involuntary_remats
from .hlo.layout_waste import aliased_parameters, compiled_shapes
from .hlo.memory import MemoryStats, stats_from_buffer_assignment, summarize_memory
from .hlo.parser import parse_hlo_module
from .hlo.step_time import DeviceSpec, estimate_step_time
from .models.report import Finding, Severity, TargetReport, TensorInfo, where_text
from .models.rule_codes import Scope
from .rules.context import RuleContext
from .rules.group_by_cause import group_by_cause
from .rules.registry import Emitter
from .rules.table import RULES, all_options
from .source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .stablehlo.module import (
    EntrySignature,
    EntrySources,
    per_device_bytes,
    read_entry_signature,
    read_entry_sources,
)
from .stablehlo.sharding_constraints import padded_values, read_constraints
from .stablehlo.state_roundtrip import correspond, suggested_out_shardings


@dataclass(frozen=True)
class CompiledFacts:
    """What compiling a target gave: HLO text and XLA's memory figures and reports."""

    hlo_text: str
    platform: str
    memory: MemoryStats | None = None
    live_range_text: str | None = None
    buffer_assignment_text: str | None = None
    # Compiled shardings per flattened result/argument, as mesh axes per dim;
    # None where unknown (then the module's own shardings stand).
    output_shardings: tuple[list[list[str]] | None, ...] | None = None
    input_shardings: tuple[list[list[str]] | None, ...] | None = None
    # The host (process index) of each logical device, when the devices span several.
    device_processes: tuple[int, ...] | None = None
    # XLA's cost_analysis() of the compiled program, where the backend gives one.
    xla_cost: dict[str, Any] | None = None
    # What XLA's SPMD partitioner printed while compiling ("Involuntary full rematerialization" lines).
    compiler_warnings: str = ""
    # The flattened arguments the user donated, as jit was asked (it drops a donation no output matches
    # before the module is written); None where only the module is known.
    donated_inputs: frozenset[int] | None = None


@dataclass(frozen=True)
class PassConfig:
    options: dict[str, Any] = field(default_factory=dict)
    severities: dict[str, Severity] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()
    budget_bytes: int | None = None
    ownership: CodeOwnership = DEFAULT_OWNERSHIP
    device_spec: DeviceSpec | None = None  # the step-time estimate's device; None: no estimate
    # How a (source, via) pair reads inside a message (paths relative to where the user is).
    where: Callable[[Any, Any], str] = where_text

    def resolved_options(self) -> dict[str, Any]:
        out = {name: opt.default for name, opt in all_options().items()}
        out.update(self.options)
        return out


def run_rules(ctx: RuleContext, config: PassConfig) -> list[Finding]:
    findings: list[Finding] = []
    for code in sorted(RULES):
        r = RULES[code]
        if r.scope is not Scope.TARGET or code in config.disabled:
            continue
        emitter = Emitter(r, config.severities.get(code, r.severity))
        r.check(ctx, emitter)
        findings.extend(group_by_cause(emitter.findings))
    return sort_findings(findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (
        -f.severity.rank, f.rule,
        f.source.file if f.source else "", f.source.line if f.source else 0, f.subject or "", f.message,
    ))


def _with_shardings(tensors, shardings, mesh) -> tuple:
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
OutShardingsHook = Callable[[tuple, tuple, tuple], "tuple[str | None, str | None]"]


def analyze_target(
    name: str, module: ir.Module, compiled: CompiledFacts, config: PassConfig,
    out_shardings_hook: OutShardingsHook | None = None,
    entry: tuple[EntrySignature, EntrySources] | None = None,
) -> TargetReport:
    """``entry``: the entry signature and sources when already read (from a copy
    of the module, on another thread while XLA compiled)."""
    # 1. The entry signature and its source lines, from StableHLO.
    sig, sources = entry or (read_entry_signature(module), read_entry_sources(module, config.ownership))
    inputs = _with_shardings(sig.inputs, compiled.input_shardings, sig.mesh)
    if compiled.donated_inputs:  # jit leaves a donation no output matches out of the module: the user's still
        inputs = tuple(t.model_copy(update={"donated": True}) if t.index in compiled.donated_inputs else t
                       for t in inputs)
    outputs = _with_shardings(sig.outputs, compiled.output_shardings, sig.mesh)
    sig_compiled = dataclasses.replace(sig, inputs=inputs, outputs=outputs)

    # 2. The compiled program: collectives and memory.
    hlo = parse_hlo_module(compiled.hlo_text)
    collectives = find_collectives(hlo, sig.mesh, compiled.device_processes, config.ownership).collectives
    memory = summarize_memory(
        compiled.memory, compiled.platform, hlo, compiled.live_range_text, compiled.buffer_assignment_text,
        config.budget_bytes, config.ownership,
    ) if compiled.memory else None

    # 3. Which outputs are inputs coming back: the step's state, whose parameters'
    # gathers and gradient reductions are intended traffic.
    roundtrips = correspond(sig_compiled)
    collectives = classify(collectives, hlo, parameters(inputs, roundtrips), sig.mesh)
    collectives = collective_origins(hlo, collectives, inputs, config.ownership, config.where)
    time, collectives = _step_time(hlo, collectives, config, compiled.xla_cost)

    # 4. Rules.
    sharded = frozenset(
        (t.dtype, tuple(t.shape)) for t in (*inputs, *outputs) if t.sharding and any(t.sharding)
    )
    ctx = RuleContext(
        target=name, platform=compiled.platform, signature=sig_compiled, inputs=inputs, outputs=outputs,
        collectives=collectives, memory=memory, roundtrips=roundtrips, options=config.resolved_options(),
        entry_source=sources.entry, input_sources=sources.inputs, output_sources=sources.outputs,
        sharded_global_shapes=sharded, partial_sum_operands=partial_sum_operands(collectives, hlo),
        collective_parameters=collective_parameters(hlo, collectives, inputs, sig.mesh),
        involuntary_remats=locate_remats(hlo, read_involuntary_remats(compiled.compiler_warnings, sig.mesh),
                                         collectives, config.ownership),
        padded_values=_padded_values(module, sig, hlo, config),
        donated_inputs=frozenset(t.index for t in inputs if t.donated),
        aliased_inputs=aliased_parameters(hlo),
    )
    findings = explain_outputs(hlo, run_rules(ctx, config), outputs, collectives)
    warnings: list[str] = []
    if out_shardings_hook is not None:
        suggestion, problem = out_shardings_hook(inputs, outputs, roundtrips)
        if problem:
            warnings.append(problem)
    else:
        suggestion = suggested_out_shardings(outputs, roundtrips)
    return TargetReport(
        name=name, platform=compiled.platform, num_devices=ctx.num_devices, mesh=dict(sig.mesh.axes),
        memory=memory, collectives=list(collectives), inputs=list(inputs), outputs=list(outputs),
        findings=findings, suggested_out_shardings=suggestion, warnings=warnings,
        axis_scope=axis_scopes(sig.mesh, compiled.device_processes) if compiled.device_processes else {},
        time=time,
    )


def analyze_refused_target(
    name: str, module: ir.Module, refusal: CompilerRefusal, platform: str, config: PassConfig,
    entry: tuple[EntrySignature, EntrySources] | None = None,
) -> TargetReport:
    """A target the compiler refused for want of memory: no compiled program, so no collectives or
    memory summary; the refusal is the over-budget finding, and what the StableHLO alone shows
    (shardings of arguments and results, donation) is checked as usual."""
    sig, sources = entry or (read_entry_signature(module), read_entry_sources(module, config.ownership))
    ctx = RuleContext(
        target=name, platform=platform, signature=sig, inputs=sig.inputs, outputs=sig.outputs, collectives=(),
        memory=None, roundtrips=correspond(sig), options=config.resolved_options(), entry_source=sources.entry,
        input_sources=sources.inputs, output_sources=sources.outputs, refusal=refusal,
    )
    return TargetReport(
        name=name, platform=platform, num_devices=ctx.num_devices, mesh=dict(sig.mesh.axes), memory=None,
        collectives=[], inputs=list(sig.inputs), outputs=list(sig.outputs), findings=run_rules(ctx, config),
        warnings=["not compiled: the compiler refused it for want of memory (SL301), so there are no collectives "
                  "and no memory breakdown"],
    )


def _padded_values(module: ir.Module, sig: EntrySignature, hlo, config: PassConfig) -> tuple:
    """The constrained values the compiled program holds padded (the compiled shapes read only when a
    constraint does not divide its value)."""
    uneven = tuple(c for c in read_constraints(module, config.ownership) if c.uneven_dims(sig.mesh))
    return padded_values(uneven, sig.mesh, compiled_shapes(hlo)) if uneven else ()


def _step_time(hlo, collectives, config: PassConfig, xla_cost: dict[str, Any] | None):
    """The estimate and the collectives with their times, slowest first (as they
    were when there is no device model)."""
    if config.device_spec is None:
        return None, tuple(collectives)
    time, timed = estimate_step_time(program_cost(hlo), collectives, config.device_spec,
                                     xla_cost_figures(xla_cost))
    return time, tuple(timed)


def _hlo_tensor(index: int, path: str, shape_text: str, sharding_attr: str | None) -> TensorInfo | None:
    arrays = parse_arrays(shape_text)
    if len(arrays) != 1:
        return None
    local = arrays[0]
    tiles = [1] * len(local.dims)
    m = re.search(r"devices=\[([\d,]+)\]", sharding_attr or "")
    if m:
        counts = [int(x) for x in m.group(1).split(",")]
        if "last_tile_dim_replicate" in (sharding_attr or "") or "last_tile_dims" in (sharding_attr or ""):
            counts = counts[: len(local.dims)]
        tiles = (counts + [1] * len(local.dims))[: len(local.dims)]
    shape = [d * t for d, t in zip(local.dims, tiles)]
    return TensorInfo(
        index=index, path=path, shape=shape, dtype=local.dtype, sharding=None, donated=False,
        bytes=array_bytes(local.dtype, shape), per_device_bytes=local.nbytes,
    )


def analyze_hlo_only(
    name: str, hlo_text: str, platform: str, config: PassConfig,
    buffer_assignment_text: str | None = None, live_range_text: str | None = None, stats: MemoryStats | None = None,
) -> TargetReport:
    """The pipeline for compiled HLO alone (an XLA dump checked in as a fixture).

    Without the StableHLO the user's mesh axis names are unknown: collectives
    name their device groups (``<4 devices>``), arguments and results carry no
    sharding, and the rules that need shardings find nothing to say. Memory comes
    from the buffer-assignment report beside the HLO when there is one, or ``stats`` where the caller has
    better figures (``memory_analysis()`` of the same program).
    """
    hlo = parse_hlo_module(hlo_text)
    entry = hlo.entry_computation
    # A parameter's number is its operand text: parameter(0).
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: int(i.operands[0]))
    inputs = tuple(t for t in (
        _hlo_tensor(k, i.op_name or i.name, i.shape, i.attrs.get("sharding")) for k, i in enumerate(params)
    ) if t is not None)
    root = next((i for i in entry.instructions if i.is_root), None)
    parts = split_tuple(root.shape) if root is not None else []
    outputs = tuple(t for t in (
        _hlo_tensor(k, f"result[{k}]" if len(parts) > 1 else "result", part, None) for k, part in enumerate(parts)
    ) if t is not None)
    mesh = MeshInfo(())
    sig = EntrySignature(None, mesh, inputs, outputs, tuple((k,) for k in range(len(inputs))),
                         tuple((k,) for k in range(len(outputs))), hlo.num_partitions)
    collectives = find_collectives(hlo, None, None, config.ownership).collectives
    time, collectives = _step_time(hlo, collectives, config, None)
    memory = summarize_memory(
        stats or stats_from_buffer_assignment(buffer_assignment_text), platform, hlo, live_range_text,
        buffer_assignment_text, config.budget_bytes, config.ownership,
    ) if buffer_assignment_text else None
    ctx = RuleContext(
        target=name, platform=platform, signature=sig, inputs=inputs, outputs=outputs, collectives=collectives,
        memory=memory, roundtrips=(), options=config.resolved_options(),
        entry_source=next((s for s in (hlo.source_of(i, config.ownership) for i in entry.instructions) if s), None),
    )
    return TargetReport(
        name=name, platform=platform, num_devices=hlo.num_partitions, mesh={}, memory=memory,
        collectives=list(collectives), inputs=list(inputs), outputs=list(outputs), findings=run_rules(ctx, config),
        time=time,
    )
