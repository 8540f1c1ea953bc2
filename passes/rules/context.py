"""What a rule sees: the facts of one target and the configured options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..hlo.collective_parameter import CollectiveParameter
from ..hlo.compiler_refusal import CompilerRefusal
from ..hlo.involuntary_remat import LocatedRemat
from ..models.entry import EntrySignature, RoundTrip
from ..models.report import Collective, MemorySummary, SourceLocation, TensorInfo, where_text
from ..propagation.propagated_padding import PropagatedPadding
from ..propagation.split_activations import SplitRead
from ..stablehlo.sharding_constraints import PaddedValue, StatedConstraint
from .registry import RuleOption

T = TypeVar("T")


@dataclass(frozen=True)
class RuleContext:
    target: str
    platform: str
    signature: EntrySignature
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    collectives: tuple[Collective, ...]
    memory: MemorySummary | None
    roundtrips: tuple[RoundTrip, ...]
    options: dict[str, Any]
    entry_source: SourceLocation | None = None
    input_sources: tuple[SourceLocation | None, ...] = ()
    output_sources: tuple[SourceLocation | None, ...] = ()
    # Outputs whose sharding the lowered program states (jit's out_shardings=, or a sharding in their type):
    # their layout is written at the jit or lower call (call_site), not where they are computed.
    stated_outputs: frozenset[int] = field(default_factory=frozenset)
    # The user's line that lowered or called the jitted function: the first user frame outside it.
    call_site: SourceLocation | None = None
    # Global (dtype, shape) of arrays the program holds sharded: a collective whose
    # per-device result has one of these shapes rebuilt the whole array.
    sharded_global_shapes: frozenset[tuple[str, tuple[int, ...]]] = field(default_factory=frozenset)
    # A partial-sum all-reduce's HLO name -> (per-device bytes of its matmul's smaller
    # operand, the input index its larger operand is, if it is one).
    partial_sum_operands: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # A collective's HLO name -> the parameter it moves or serves (hlo/collective_parameter.py).
    collective_parameters: dict[str, CollectiveParameter] = field(default_factory=dict)
    # An all-gather's HLO name -> the instructions that read its result (hlo/gather_readers.py).
    gather_readers: dict[str, frozenset[str]] = field(default_factory=dict)
    # Partial-sum all-reduces whose matmul's other operand each device sliced from a value it holds whole:
    # the weight alone splits the contraction (hlo/collective_parameter.py's sliced_partial_sums).
    sliced_partial_sums: frozenset[str] = frozenset()
    # Partial-sum all-reduces whose matmul's other operand is a norm of an activation split on the contracted
    # dimension, its statistics summed over the same axes: the norm read it whole between this matmul and
    # the one before, no tensor-parallel pair (hlo/normalized_sums.py).
    normalized_partial_sums: frozenset[str] = frozenset()
    # Such a sum -> the all-reduces its input is computed from past attention's weightless matmuls (an output
    # projection's, after q, k and v kernels summed their outputs whole): hlo/attention_sums.py.
    attention_inputs: dict[str, frozenset[str]] = field(default_factory=dict)
    # Partial-sum all-reduces that close a column/row tensor-parallel pair (Megatron's row-parallel
    # reduction, by design): HLO name -> why (hlo/tensor_parallel_pairs.py).
    row_parallel_sums: dict[str, str] = field(default_factory=dict)
    # A forward partial-sum all-reduce's HLO name -> the weight of the one matmul its result feeds (the other
    # half of the tensor-parallel pair a column-parallel fix makes): hlo/pair_partners.py.
    pair_partners: dict[str, CollectiveParameter] = field(default_factory=dict)
    # A combined reduction's HLO name -> its values, each a collective of its own whose facts above are
    # found alone (hlo/combined_parts.py): a finding about one value describes that value only.
    collective_parts: dict[str, tuple[Collective, ...]] = field(default_factory=dict)
    # The compiler refused the program for want of memory (a TPU compile): its figures stand for the peak.
    refusal: CompilerRefusal | None = None
    # Values XLA's partitioner could reshard only by replicating them, each at its line.
    involuntary_remats: tuple[LocatedRemat, ...] = ()
    # Values the user constrained on axes that do not divide them, which the compiled program holds padded.
    padded_values: tuple[PaddedValue, ...] = ()
    # The user's with_sharding_constraint ops, as the StableHLO states them.
    constraints: tuple[StatedConstraint, ...] = ()
    # Values Shardy's propagation cuts unevenly (no constraint stated it), which the compiled program holds padded.
    propagated_padding: tuple[PropagatedPadding, ...] = ()
    # Matmul operands propagation splits along a dimension the matmul contracts, with the matmul whose weight
    # puts that split on them (SL105 names it where the gather is of an activation, no argument).
    split_reads: tuple[SplitRead, ...] = ()
    # Entry argument -> its dimensions a matmul batches over, reading it as it is (an MoE's expert weights'
    # expert dimension): where SL105 moves the axis of a weight an all-to-all moves to that dimension.
    argument_batch_dims: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # Inputs the user donated (the module's donors, and those jit dropped for want of a matching output:
    # TensorInfo.donated says both),
    # and the inputs whose buffer a compiled output reuses (None: not compiled).
    donated_inputs: frozenset[int] = frozenset()
    aliased_inputs: frozenset[int] | None = None
    # The collectives some rule's findings explain (RuleTraits.claims, every rule's), by HLO name: set by the
    # rules stage before any rule runs.
    claimed_collectives: frozenset[str] = frozenset()
    # The same, by the rule that claims them (its code): a rule's findings stand for its own claims only.
    claims_by_rule: dict[str, frozenset[str]] = field(default_factory=dict)
    # A location in a message, written as the reports write its source (PassConfig.where): one path form, a
    # library's file relative as in the report's sources, never absolute in the text beside them.
    where: Callable[[Any, Any], str] = where_text

    def option(self, option: RuleOption[T]) -> T:
        """The option's value as configured (its default where nothing set it: ``options`` is resolved)."""
        value: T = self.options[option.name]
        return value

    @property
    def num_devices(self) -> int:
        return self.signature.mesh.size if self.signature.mesh.axes else self.signature.num_partitions

    def input_source(self, index: int) -> SourceLocation | None:
        src = self.input_sources[index] if index < len(self.input_sources) else None
        return src or self.entry_source

    def output_source(self, index: int) -> SourceLocation | None:
        src = self.output_sources[index] if index < len(self.output_sources) else None
        return src or self.entry_source
