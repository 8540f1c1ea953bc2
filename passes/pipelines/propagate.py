"""The propagate pipeline: ``PROPAGATE``'s stages, from a target's StableHLO (and
the collectives its compiled program has, where it was compiled) to its
``propagate`` report: our propagation (flattened call graph, Shardy's rules, the
graph, propagation), the values with their provenance, the communication the
layout implies matched against the compiled collectives, agreement with Shardy's
own propagation of the same module, and the values ``--explain`` names. ``propagate_module`` runs them
in order around the analyzer's compile of the module (a callback: it makes devices and runs XLA)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from jaxlib.mlir import ir

from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes
from ..hlo.collectives import find_collectives
from ..hlo.parser import parse_hlo_module
from ..models.entry import EntrySignature
from ..models.propagation import PropagationReport
from ..models.report import Collective, SourceLocation
from ..propagation.borne_out import match_compiled, prediction_counts
from ..propagation.graph import Tensor
from ..propagation.predicted_communication import predict
from ..propagation.report import (
    Propagated,
    agreement,
    chain_heading,
    explain,
    find_values,
    propagated_value,
    run_propagation,
)
from ..propagation.report import with_provenance as with_values_provenance
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import read_meshes
from .entry import entry_signature
from .pass_manager import Pipeline

# What the analyzer catches (Shardy refusing the module) and keeps (the propagated graph, for --explain).
__all__ = ["MAX_VALUES", "Propagated"]

PROPAGATE = Pipeline("propagate", (
    "entry-signature", "compiled-collectives", "propagation", "values", "predictions", "shardy-agreement",
    "explain",
), reads={
    "entry-signature": (),
    "compiled-collectives": ("entry-signature",),  # the mesh's axes
    "propagation": (),
    "values": ("propagation",),
    "predictions": ("compiled-collectives", "propagation"),
    "shardy-agreement": ("propagation",),
    "explain": ("propagation", "values"),  # the values --explain names, in the reports' values
})

MAX_VALUES = 200


def devices_needed(module: ir.Module, sig: EntrySignature) -> int:
    """The device count a module states (mhlo.num_partitions, its meshes): virtual CPU devices past this
    many are not made for it (it propagates, it is not compiled)."""
    meshes = PROPAGATE.run("entry-signature", read_meshes, module)
    return max([sig.num_partitions] + [prod(size for _, size in mesh.axes) for mesh in meshes.values()])


def compiled_collectives(hlo_text: str, mesh: MeshInfo, processes: tuple[int, ...] | None = None,
                         ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> list[Collective]:
    """Stage 2: the collectives of the compiled program, to match predictions against."""
    hlo = PROPAGATE.run("compiled-collectives", parse_hlo_module, hlo_text)
    return list(PROPAGATE.run("compiled-collectives", find_collectives, hlo, mesh, processes, ownership).collectives)


def build_report(
    name: str, module: ir.Module, compiled: list[Collective] | None = None, with_shardy: bool = True,
    provenance: bool = False, ownership: CodeOwnership = DEFAULT_OWNERSHIP, max_values: int | None = MAX_VALUES,
) -> tuple[PropagationReport, Propagated]:
    """The report of one module. Values are listed largest first, at most
    ``max_values`` of them (None: all); provenance chains are kept as parent links
    in the graph and written out only where asked for (``provenance``, or
    ``with_provenance`` for the values ``--explain`` names)."""
    p = PROPAGATE.run("propagation", run_propagation, module, ownership)
    tensors = sorted((t for t in p.graph.tensors if not t.virtual and t.compare),
                     key=lambda t: (-array_bytes(t.dtype, list(t.shape)), t.name))
    listed = tensors if max_values is None else tensors[:max_values]
    values = [PROPAGATE.run("values", propagated_value, p, t, provenance) for t in listed]
    predicted = PROPAGATE.run("predictions", lambda: match_compiled(predict(p.graph), compiled))
    report = PropagationReport(
        name=name, mesh=dict(p.graph.axis_sizes), values=values, values_omitted=len(tensors) - len(listed),
        predicted=predicted, prediction_counts=PROPAGATE.run("predictions", prediction_counts, predicted, compiled),
        agreement_with_shardy=PROPAGATE.run("shardy-agreement", agreement, p, module) if with_shardy else None,
        ops_without_rule=sorted(set(p.graph.without_rule)), sweeps=p.sweeps,
    )
    return report, p


def explain_values(
    reports: list[PropagationReport], propagated: list[Propagated], queries: list[str],
    display: Callable[[SourceLocation], str],
) -> tuple[dict[str, list[str]], list[PropagationReport] | None, str | None]:
    """Stage 7, ``--explain``: each query's provenance lines (the first three values it names in each
    target, each value's chain indented under a heading that names it and its sharding, and, with several
    targets, the target's), the reports with those values' provenance written out (None: no value named),
    and the first query that names no value (None: all did)."""
    explained: dict[str, list[str]] = {}
    named: list[list[Tensor]] = [[] for _ in propagated]
    for query in queries:
        lines = []
        for k, p in enumerate(propagated):
            for t in PROPAGATE.run("explain", find_values, p, query)[:3]:
                head = PROPAGATE.run("explain", chain_heading, p, t, display)
                lines.append(f"{reports[k].name}: {head}" if len(propagated) > 1 else head)
                lines.extend("  " + line for line in PROPAGATE.run("explain", explain, p, t, display))
                named[k].append(t)
        if not lines:
            return explained, None, query
        explained[query] = lines
    if not any(named):
        return explained, None, None
    # The explained values carry their provenance in every format.
    return explained, [PROPAGATE.run("explain", with_values_provenance, r, p, ts) if ts else r
                       for r, p, ts in zip(reports, propagated, named)], None


@dataclass(frozen=True)
class CompiledProgram:
    """What the analyzer's compile hands back: the optimized HLO, and how its collectives are read."""

    hlo_text: str
    processes: tuple[int, ...] | None = None
    ownership: CodeOwnership = DEFAULT_OWNERSHIP


# The analyzer's compile of the module with this entry signature: the program, or None and why not (None
# and None: not compiled, nothing to say).
CompileModule = Callable[[EntrySignature], tuple[CompiledProgram | None, str | None]]


def propagate_module(name: str, module: ir.Module, compile_module: CompileModule | None,
                     ownership: CodeOwnership = DEFAULT_OWNERSHIP, max_values: int | None = MAX_VALUES,
                     entry: EntrySignature | None = None) -> tuple[PropagationReport, Propagated, str | None]:
    """``PROPAGATE``'s stages 1 to 6 in order around the analyzer's compile (None: no compile): the report,
    the propagated graph (for ``--explain``) and why the module was not compiled (None: it was, or was not
    asked to be). ``entry``: stage 1's entry signature when the analyzer read it first (a checked-in module's
    device count, made into devices at the command's start)."""
    sig = entry if entry is not None else entry_signature(module, PROPAGATE)  # 1
    program, not_compiled = compile_module(sig) if compile_module is not None else (None, None)
    compiled = None if program is None else compiled_collectives(  # 2
        program.hlo_text, sig.mesh, program.processes, program.ownership)
    report, propagated = build_report(name, module, compiled, ownership=ownership, max_values=max_values)  # 3-6
    return report, propagated, not_compiled
