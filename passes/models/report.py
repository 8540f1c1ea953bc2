"""Result models shared by the passes and rendered by the reports.

Every model is frozen: a pass returns facts, nothing downstream edits them. List
fields are built in a deterministic order by the pass that fills them, so the
JSON a report writes is byte-identical for the same program.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from .fix_check import FixCheck
from .per_member_copy import PerMemberCopy

# 1.1: findings are grouped by cause (count, bytes, ops), name their parameter and the
# sharding to give it (every parameter, `parameters`, when one change covers several), and carry
# the compiled check of their fix.
SCHEMA_VERSION: Final = "1.1"


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]


class SourceLocation(Model):
    """A line of code: as a ``source``, the innermost frame of the op's stack in
    the user's code; as a ``via``, the innermost library frame it went through."""

    file: str
    line: int
    function: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


VIA_FIELD = Field(default=None, description="The innermost library frame the op went through (flax, optax, ...), "
             "when that is not the user's own line; set alone when no frame is the user's.")


def where_text(source: SourceLocation | None, via: SourceLocation | None) -> str:
    """``model.py:41 via flax/nnx/nn/linear.py:210``; ``(no user frame) via
    optax/_src/numerics.py:143`` when no frame is the user's; ``-`` when nothing is known."""
    if source is not None:
        return f"{source} via {via}" if via is not None else str(source)
    if via is not None:
        return f"(no user frame) via {via}"
    return "-"


class ArrayType(Model):
    """A value's element type and global shape, as XLA spells them together (``f32[1,64,16384]``)."""

    dtype: str
    shape: list[int]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


class TensorInfo(Model):
    """One flattened argument or result of a target's entry function."""

    index: int = Field(description="Position among the flattened arguments or results.")
    path: str = Field(description="Pytree path, e.g. state['w'] or result[0]['w'].")
    shape: list[int]
    dtype: str
    sharding: list[list[str]] | None = Field(
        description="Mesh axes per dimension (a PartitionSpec as lists); [] per dim is replicated; "
        "null when the program does not say.")
    donated: bool = False
    bytes: int = Field(description="Global size in bytes.")
    per_device_bytes: int = Field(description="Bytes one device holds under this sharding.")


class CollectivePart(Model):
    """One of the values a combined collective moves."""

    shape: list[int]
    dtype: str
    bytes: int = Field(description="Per-device result bytes of this value.")
    source: SourceLocation | None = Field(description="The user's line that computed (a reduction) or reads (a "
                                          "gather) this value; null where the program has none.")
    via: SourceLocation | None = VIA_FIELD


# Collective.intent of a collective only a failing runtime check runs (hlo/error_paths.py): left out of the step.
ERROR_PATH = "error-path"


class Collective(Model):
    """A collective the compiled program runs."""

    kind: str = Field(description="HLO spelling: all-gather, all-reduce, reduce-scatter, all-to-all, ...")
    bytes: int = Field(description="Per-device result bytes of one execution.")
    count: int = Field(description="Executions per step (a while body's known trip count multiplies).")
    mesh_axes: list[str] = Field(description="The user's mesh axes the collective runs over.")
    shape: list[int]
    dtype: str
    op_name: str | None
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    hlo_name: str
    computation: str
    is_async: bool = False
    group_size: int
    count_is_lower_bound: bool = Field(
        default=False, description="True inside a loop whose trip count XLA could not prove (counted once).")
    count_assumed: bool = Field(default=False, description="Inside such a loop, counted as --loop-trips says.")
    count_upper_bound: int | None = Field(default=None, description="Inside such a loop: the count were each to "
                                          "run to the bound its condition proves; null where one has none.")
    count_in_branch: bool = Field(
        default=False, description="In a conditional branch the program's data selects: counted by the trips "
        "certainly taking it (a lower bound, count_is_lower_bound); count_upper_bound by the trips that may.")
    cross_host: bool | None = Field(default=None, description="Whether a device group spans hosts; null when all "
                                    "devices are on one host.")
    intent: str | None = Field(
        default=None, description="Why it runs: parameter-gather (FSDP), gradient-reduction, activation "
        "(tensor-parallel partial sums), explicit (the program's own psum, all_gather, ppermute... in a "
        "shard_map), constraint (a move between two layouts the program's with_sharding_constraints state: an MoE's "
        "dispatch), error-path (run only when a runtime check fails: equinox's error_if broadcasting its host "
        "callback's result), or reshard (no stated sharding asked for it); null without a mesh.")
    seconds: float | None = Field(
        default=None, description="Estimated time per step, all executions (ring algorithm over the link it "
        "crosses); null without a device model.")
    input_path: str | None = Field(
        default=None, description="The input the collective's operand is (traced through layout ops, one layer "
        "of a stack and loop carries in the compiled HLO), when it is one.")
    why: str | None = Field(default=None, description="Why a resharding collective runs: the op that reads along a "
                            "sharded dimension, and what XLA does about it; for a tensor-parallel partial sum that "
                            "closes a column/row pair, why it is the designed reduction (both weights).")
    called_from: SourceLocation | None = Field(
        default=None, description="When collectives of several call paths share this source line (a helper every "
        "projection calls): the first user frame further out where their paths part (the attention or the MLP "
        "that called the helper).")
    pieces: list[str] = Field(
        default_factory=list, description="The other HLO instructions this collective is split into (its channel's: a "
        "TPU async collective fusion's start, continuation and done steps), counted once with hlo_name.")
    parts: list[CollectivePart] = Field(
        default_factory=list, description="The values a combined collective moves together (XLA's combiner joins a "
        "step's gradient all-reduces, or a layer's parameter gathers, into one), largest first; empty for one value. "
        "The collective's shape and dtype are its largest part's.")

    @property
    def total_bytes(self) -> int:
        return self.bytes * self.count


class LiveBuffer(Model):
    """A buffer live at the per-device memory peak."""

    name: str
    bytes: int
    shape: list[int] | None
    dtype: str | None
    op_name: str | None
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    copy_of: str | None = Field(default=None, description="What a copy XLA added (a layout change: a wrapped_copy "
                                "of a gathered value) copies: an HLO name (source, op_name: its), or 'argument PATH'.")
    filled_for: str | None = Field(default=None, description="A buffer XLA fills from constants (no line of its own): "
                                   "its consumer's HLO name, whose line is its source.")
    per_member_copy: PerMemberCopy | None = Field(default=None, description=(
        "What the buffer is where it is a parameter's per-device shape with a vmap's batch dimension added "
        "(a gradient per member of a batch, the parameter closed over); null otherwise."))


class MemoryTimelinePoint(Model):
    step: int
    bytes: int


class MemorySummary(Model):
    """Per-device memory of the compiled program.

    ``peak_bytes`` is XLA's figure, temp + argument + output - alias: what the executable allocates on a
    device, its temp allocation whole. It is not ``memory_analysis().peak_memory_in_bytes``, which XLA's CPU
    executable fills from its buffer assignment without the temp allocation (argument + output - alias within
    a few bytes, on jax 0.10.2 and 0.12; tests/analyzer/commands/test_xla_peak_field.py). ``live_at_peak`` and
    ``timeline`` come from XLA's live-range report, whose own peak (the heap simulator's, ``live_range_peak_bytes``)
    counts only the entry computation's buffers and can differ."""

    platform: str
    peak_bytes: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    generated_code_bytes: int = 0
    budget_bytes: int | None = None
    headroom_bytes: int | None = None
    live_range_peak_bytes: int | None = None
    peak_step: int | None = None
    live_at_peak: list[LiveBuffer] = Field(default_factory=list)
    timeline: list[MemoryTimelinePoint] = Field(default_factory=list)


class StepTime(Model):
    """An estimated step time from the compiled program and the device's published
    peaks; ``seconds`` is the overlapped bound, ``serial_seconds`` the no-overlap sum."""

    device: str = Field(description="The device model's name: cpu, h100, tpu-v5p, ...")
    device_description: str
    nominal: bool = Field(default=False, description="True for CPU figures: for ranking, not a prediction.")
    basis: str
    seconds: float = Field(description="max(compute, async communication, offloaded work) + synchronous "
                           "communication.")
    serial_seconds: float = Field(description="compute + all communication, nothing overlapped.")
    compute_seconds: float = Field(description="Sum over operations of max(FLOPs / peak, bytes / HBM bandwidth).")
    flop_seconds: float = Field(description="Matmul FLOPs over the peak alone.")
    memory_seconds: float = Field(description="Bytes touched over HBM bandwidth alone.")
    offloaded_seconds: float = Field(
        default=0.0, description="Work XLA runs on another execution thread (a TPU's SparseCores): its bytes over HBM "
        "bandwidth, overlapped with compute.")
    communication_seconds: float
    async_communication_seconds: float
    within_host_seconds: float
    across_hosts_seconds: float
    flops: float = Field(description="Matmul FLOPs per step per device, counted from the compiled HLO.")
    bytes_accessed: float = Field(description="Bytes the operations touch per step per device.")
    xla_flops: float | None = Field(default=None, description="XLA's cost_analysis() flops, where it gives them.")
    xla_bytes_accessed: float | None = None
    xla_optimal_seconds: float | None = Field(
        default=None, description="The TPU compiler's own estimate (cost_analysis optimal_seconds), where given.")
    sources: list[str] = Field(default_factory=list, description="Where the device's figures come from.")
    notes: list[str] = Field(default_factory=list)
    compute_counted_once: int = Field(
        default=0, description="Operations in loops whose trip count XLA does not know, counted once each (no "
        "--loop-trips): the estimate is then a lower bound (a NUTS step's tree building, a diffrax solve).")


class ConstraintCause(Model):
    """A ``with_sharding_constraint`` in the user's code whose sharding a collective undoes."""

    source: SourceLocation | None = Field(description="The user's line that states the constraint.")
    sharding: list[list[str]] = Field(description="The sharding it states, axes per dimension.")


# How a FixCandidate names the with_sharding_constraint its finding's ``constraint`` is (restated in the layout).
STATED_CONSTRAINT = "with_sharding_constraint"


class FixCandidate(Model):
    """One layout a finding's fix check compiles, as the rule derived it."""

    value: str = Field(description="What takes the layout: an argument's path (the argument moved, with the "
                       "optimizer state that mirrors it, and returned in that layout), or the value the finding names "
                       "(propagated_value[op][result]: a with_sharding_constraint inserted on it; several, "
                       "space-separated, where one line's op runs in several places: SL105's matmul output in a "
                       "layer's forward and its rematerialized copy), or one of SL104's "
                       "staged layouts (staged_layout[i]: the value's layouts in order, the last the one asked for), "
                       "or with_sharding_constraint: the finding's constraint stating this layout instead.")
    sharding: list[list[str]] = Field(description="The layout, axes per dimension.")
    together: list[FixCandidate] = Field(
        default_factory=list, description="Other arguments the same change moves, each with its layout (SL103's "
        "tensor-parallel pair: the weight whose matmul reads this one's output, onto the dimension that matmul "
        "contracts, as the value goes onto the dimension its matmul produces); empty for a move of one.")


class Finding(Model):
    rule: str = Field(description="Stable rule code, e.g. SL101.")
    name: str = Field(description="Kebab-case rule name.")
    severity: Severity
    message: str
    source: SourceLocation | None
    via: SourceLocation | None = VIA_FIELD
    fix: str | None = None
    subject: str | None = Field(default=None, description="What the finding is about: an HLO op, a pytree path.")
    provenance: list[str] = Field(
        default_factory=list, description="Why, from sharding propagation: how the value got its sharding."
    )
    count: int = Field(default=1, description="How many ops or values share this cause (rule, user line, library "
                       "frame and parameter): one finding stands for all of them.")
    bytes: int | None = Field(default=None, description="Per-device bytes per step of all of them together.")
    ops: list[str] = Field(default_factory=list, description="The HLO ops (or values) this finding stands for, when "
                           "more than the subject.")
    parameter: str | None = Field(
        default=None, description="The parameter (argument path) the finding comes from: the input a collective "
        "moves, or the weight of the matmul it serves; across layers a pattern, h[*]['attn']['kernel'].")
    parameters: list[str] = Field(
        default_factory=list, description="Every parameter (path or layer pattern) of a cause that covers several "
        "given the same change, the largest first (which is `parameter`); empty for one.")
    parameter_sharding: list[list[str]] | None = Field(default=None, description="Its sharding, axes per dimension.")
    suggested_sharding: list[list[str]] | None = Field(
        default=None, description="The sharding the fix gives the parameter, axes per dimension.")
    fix_check: FixCheck | None = Field(
        default=None, description="The fix applied and compiled: what it does to the peak and the traffic; null "
        "where it was not checked.")
    constraint: ConstraintCause | None = Field(
        default=None, description="The with_sharding_constraint whose sharding causes it, where no argument's "
        "does (a loop body's own constraint the next op reads along); null otherwise.")
    candidates: list[FixCandidate] = Field(
        default_factory=list, description="The layouts the fix check compiles, in the rule's order (SL206's: the "
        "constraints on the padded value, and the moves of the argument it inherits its sharding from); empty "
        "where the check derives its own.")
    split_origin: SourceLocation | None = Field(
        default=None, description="Where the split the finding's gathers undo begins (SL105 about an activation: "
        "the line of the matmul whose output the split comes from, which its inserted constraint names); null "
        "otherwise.")
    rematerialized_value: ArrayType | None = Field(
        default=None, description="The value XLA replicates whole on every device (SL104: its type and global "
        "shape), which a fix check tells apart from one the program as written replicates too; null otherwise.")


class TargetReport(Model):
    name: str
    platform: str
    num_devices: int
    mesh: dict[str, int]
    memory: MemorySummary | None
    collectives: list[Collective]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    findings: list[Finding]
    suggested_out_shardings: str | None = Field(
        default=None, description="out_shardings= text pinning every state output to its input's layout."
    )
    suppressed: int = Field(default=0, description="Findings silenced by shard-lint: ignore comments.")
    axis_scope: dict[str, str] = Field(
        default_factory=dict, description="Per mesh axis: within-host or cross-host (multi-host targets only)."
    )
    warnings: list[str] = Field(default_factory=list)
    call_site: SourceLocation | None = Field(
        default=None, description="run: the line the program was compiled from (its outermost user frame).")
    compilations: int = Field(default=1, description="run: how many times this program was compiled.")
    time: StepTime | None = Field(default=None, description="Estimated step time, with its basis.")

    @property
    def cross_host_bytes(self) -> int:
        return sum(c.bytes * c.count for c in self.collectives if c.cross_host)

    @property
    def collective_bytes(self) -> int:
        """Per-device bytes of every collective per step (bytes x count, summed): the one figure rewrite's
        "collectives / step" and lint's fix checks both print."""
        return sum(c.bytes * c.count for c in self.collectives)


class RuleDoc(Model):
    """A rule's documentation, carried in reports so renderers need nothing else."""

    code: str
    name: str
    severity: Severity
    summary: str
    doc: str


class ScriptRun(Model):
    """How the script ran under ``jax-shard-lint run``."""

    exit_code: int
    error: str | None = Field(description="The script's last error line when it did not finish cleanly.")
    timed_out: bool = Field(default=False, description="run's --timeout stopped the script (not a failure: what "
                            "it compiled until then is the report).")
    programs_compiled: int
    programs_reported: int
    skipped: list[str] = Field(default_factory=list, description="Programs left out, and why.")


class RunHeader(Model):
    """What every report starts with: the schema, the versions, the command."""

    schema_version: Literal["1.1"] = SCHEMA_VERSION
    tool_version: str
    jax_version: str
    jaxlib_version: str
    command: str
    script: str | None


class LintReport(RunHeader):
    command: str = "lint"
    targets: list[TargetReport]
    findings: list[Finding] = Field(
        default_factory=list, description="Findings about the whole run, e.g. unused suppressions."
    )
    rules: list[RuleDoc] = Field(default_factory=list, description="Documentation of every rule that was enabled.")
    run: ScriptRun | None = None
    source_notes: list[str] = Field(default_factory=list, description="Files read with a newer grammar, or unread.")

    def all_findings(self) -> list[Finding]:
        return [f for t in self.targets for f in t.findings] + list(self.findings)

    def worst_severity(self) -> Severity | None:
        ranks = [f.severity for f in self.all_findings()]
        return max(ranks, key=lambda s: s.rank) if ranks else None
