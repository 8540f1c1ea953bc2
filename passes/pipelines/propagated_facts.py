"""What lint's rules read from the stated constraints and Shardy's propagation beside the compiled program
(``lint.analyze_target``'s rule facts): the values held padded, and where an activation's split comes from.
Shardy's propagation runs only when a rule that reads it is on."""

from __future__ import annotations

from jaxlib.mlir import ir

from ..hlo.layout_waste import compiled_shapes
from ..hlo.module import HloModule
from ..models.entry import EntrySignature
from ..models.report import Collective
from ..models.rule_codes import SL105, SL207
from ..propagation.propagated_padding import PropagatedPadding, propagated_padded_values
from ..propagation.split_activations import SplitRead, argument_batch_dims, split_reads
from ..rules.table import codes_where
from ..stablehlo.sharding_constraints import PaddedValue, padded_values, read_constraints
from .inputs import PassConfig

_READ_SHARDY_PROPAGATION = codes_where(lambda t: t.reads_shardy_propagation)


def constrained_padding(module: ir.Module, sig: EntrySignature, hlo: HloModule,
                   config: PassConfig) -> tuple[PaddedValue, ...]:
    """The constrained values the compiled program holds padded (the compiled shapes read only when a
    constraint does not divide its value)."""
    uneven = tuple(c for c in read_constraints(module, config.ownership) if c.uneven_dims(sig.mesh))
    return padded_values(uneven, sig.mesh, compiled_shapes(hlo)) if uneven else ()


def propagated_padding(module: ir.Module, sig: EntrySignature, hlo: HloModule,
                        config: PassConfig) -> tuple[PropagatedPadding, ...]:
    """The values Shardy's propagation cuts unevenly that the compiled program holds padded (SL206's;
    Shardy's propagation is run only when a rule that reads it is on)."""
    if _READ_SHARDY_PROPAGATION <= config.disabled:
        return ()
    stated = read_constraints(module, config.ownership)
    return propagated_padded_values(module, sig.mesh, compiled_shapes(hlo), stated, config.ownership)


def activation_splits(module: ir.Module, sig: EntrySignature, collectives: tuple[Collective, ...],
                 config: PassConfig) -> tuple[SplitRead, ...]:
    """Where an activation's split comes from (SL105's gathers of no argument): Shardy's propagation is run
    only when SL105 is on and XLA gathers a value no stated sharding asked for."""
    lines = frozenset((c.source.file, c.source.line) for c in collectives
                      if c.intent == "reshard" and c.kind == "all-gather" and c.source is not None)
    if SL105.code in config.disabled or not lines:
        return ()
    return split_reads(module, sig.mesh, [t.sharding or [] for t in sig.inputs], [tuple(t.shape) for t in sig.inputs],
                       lines, config.ownership)


def batch_dims(module: ir.Module, sig: EntrySignature, collectives: tuple[Collective, ...],
               config: PassConfig) -> dict[int, tuple[int, ...]]:
    """The arguments' dimensions a matmul batches over: SL105's candidate for a weight an all-to-all moves (read
    when SL105 is on and an all-to-all no stated sharding asked for is in the program), and SL207's batch of a
    step that leaves a mesh axis idle (a vmapped batch's dimension: read when SL207 is on and a mesh axis of
    several devices splits no argument)."""
    reshards = SL105.code not in config.disabled and any(
        c.intent == "reshard" and c.kind == "all-to-all" for c in collectives)
    used = {a.split(":")[0] for t in sig.inputs for dim in (t.sharding or []) for a in dim}
    idle = SL207.code not in config.disabled and any(n > 1 and a not in used for a, n in sig.mesh.axes)
    return argument_batch_dims(module) if reshards or idle else {}
