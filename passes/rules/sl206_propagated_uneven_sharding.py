"""SL206 propagated-uneven-sharding: the check, whose docstring is the rule's documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..models.fix_check import StatedLayoutEdit
from ..models.report import STATED_CONSTRAINT, ConstraintCause, FixCandidate, Severity, TensorInfo
from ..models.rule_codes import SL206
from ..propagation.propagated_padding import PropagatedPadding, StatedCut
from ..stablehlo.sharding_constraints import axes_off, even_alternatives
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

PROPAGATED_PADDING_MIN_BYTES = RuleOption(
    "propagated-padding-min-bytes", 0, OptionKind.bytes,
    "smallest per-device padding of a propagated uneven sharding reported")
# A byte of padding on a 256-byte shard (a new user's s32[255] index cut 4 ways: 0% of it) is nothing to act
# on, and a warning fails a `--fail-on warning` gate: padding under this share of the shard is not reported.
PROPAGATED_PADDING_MIN_SHARE = RuleOption(
    "propagated-padding-min-share", 0.01, OptionKind.fraction,
    "smallest share of a device's shard that a propagated uneven sharding's padding must be to be reported")


def propagated_value_path(op_index: int, result: int) -> str:
    """How a finding names a propagated value: the fix check constrains result ``result`` of the op at
    ``op_index`` in the module's walk."""
    return f"propagated_value[{op_index}][{result}]"


def source_argument(p: PropagatedPadding, inputs: tuple[TensorInfo, ...]) -> TensorInfo | None:
    """The argument whose sharding propagation carried onto the uneven dimension: the nearest one the value
    is computed from that holds one of its uneven axes (None: an axis no argument holds, a constraint's)."""
    by_index = {t.index: t for t in inputs}
    for i in p.arguments:
        t = by_index.get(i)
        if t is not None and p.uneven_axes & {a.split(":")[0] for dim in (t.sharding or []) for a in dim}:
            return t
    return None


def source_constraint(p: PropagatedPadding) -> StatedCut | None:
    """Where no argument holds the uneven axes: the nearest constraint the value is computed from that states
    one of them (the user's ``with_sharding_constraint``, whose cut propagation carried onto the value)."""
    return next((k for k in p.constraints
                 if p.uneven_axes & {a.split(":")[0] for dim in k.sharding for a in dim}), None)


def propagated_uneven_sharding(ctx: RuleContext, out: Emitter) -> None:
    """A value no sharding was stated for is sharded on a dimension its axes do not divide, and XLA pads it.

    What it does
    ------------
    Reads the shardings Shardy's propagation gives every value of the program
    (the propagation XLA runs) and reports a value sharded on a dimension of
    n elements cut into k shards where k does not divide n, when its operands
    are evenly sharded (where the unevenness begins: the ops that inherit it
    are the same cause), no `with_sharding_constraint` stated that cut (that
    is SL204), the compiled program holds the value at the padded per-device
    shape ceil(n/k), and the padding each device holds beyond an even split is
    at least `propagated-padding-min-bytes` (0: any) and at least
    `propagated-padding-min-share` of the device's shard (1%: a byte of padding
    on a 256-byte shard is nothing to act on). One finding per user line,
    naming the argument whose sharding propagation carried onto that dimension
    (the nearest argument the value is computed from that holds its uneven
    axes), with its PartitionSpec; where no argument holds them, the
    `with_sharding_constraint` that states them (its line and PartitionSpec,
    in the finding's `constraint`).

    Why is this bad
    ---------------
    A value of 16 rows sharded 8 ways and padded (`jnp.pad`) or concatenated
    to 20 rows keeps its operand's sharding: 20 rows on 8 devices, which XLA
    holds as 3 rows per device, 24 in all, a sixth of them padding, with the
    masking (`select`) and the reshuffling of rows between devices that keeps
    the padding out of the results. Nothing in the source says so.

    Example
    -------
    ```python
    x = ...                                   # f32[16, 1024] on P('data')
    y = jnp.tanh(jnp.pad(x, ((0, 4), (0, 0))))  # f32[20, 1024]: 20 rows on 8 devices
    ```

    Fix
    ---
    Keep the uneven axes off that dimension of the argument it inherits them
    from (moved to another dimension they divide, or dropped; its optimizer
    state with it) or of the `with_sharding_constraint` that states them, or
    state a sharding whose axes divide the value (`with_sharding_constraint` on it, the uneven axes moved to a dimension
    they divide, or only the axes that divide it kept). Each is applied to the
    program (the argument's sharding, or a constraint inserted on the value),
    compiled, and the one measured best is printed, only when measured better
    (the candidates are the finding's `candidates`). Making the
    dimension a multiple of its shards (pad to 24 rows, not 20) also ends the
    padding, but it changes the program's values, so the message names the
    size and nothing compiles it as a fix.
    """
    limit, share_limit = ctx.option(PROPAGATED_PADDING_MIN_BYTES), ctx.option(PROPAGATED_PADDING_MIN_SHARE)
    mesh = ctx.signature.mesh
    for p in ctx.propagated_padding:
        if p.padding_bytes < limit or p.padding_bytes < share_limit * p.local_bytes:
            continue
        shape = f"{p.dtype}[{','.join(map(str, p.shape))}]"
        local = f"{p.dtype}[{','.join(map(str, p.local_shape))}]"
        dims = ", ".join(f"dimension {d} ({p.shape[d]}) into {p.ways[d]}" for d in p.uneven_dims)
        sizes = ", ".join(f"dimension {d} of {-(-p.shape[d] // p.ways[d]) * p.ways[d]}" for d in p.uneven_dims)
        choices = even_alternatives(p.shape, p.sharding, mesh)
        share = p.padding_bytes / p.local_bytes
        value = propagated_value_path(p.op_index, p.result)
        argument = source_argument(p, ctx.inputs)
        moves = (axes_off(tuple(argument.shape), argument.sharding or [], set(p.uneven_axes), mesh)
                 if argument is not None else [])
        stated = source_constraint(p) if argument is None else None
        # The constraint that is the cause, with the uneven axes moved to another dimension they divide or dropped.
        restated = axes_off(stated.shape, stated.sharding, set(p.uneven_axes), mesh) if stated is not None else []
        line = f" at line {stated.source.line}" if stated is not None and stated.source is not None else ""
        # A size the axes divide changes the program's values: named in the message, never compiled as a fix.
        fix = (f"shard {argument.path} as {pspec_text(moves[0])} instead of {pspec_text(argument.sharding or [])}"
               if argument is not None and moves else
               f"state {pspec_text(restated[0])} in the with_sharding_constraint{line} instead of "
               f"{pspec_text(stated.sharding)}" if stated is not None and restated else
               f"constrain it with jax.lax.with_sharding_constraint to {pspec_text(choices[0])}, whose axes "
               "divide every dimension" if choices else None)
        inherited = (f"; it inherits the sharding of argument {argument.path} {pspec_text(argument.sharding or [])}"
                     if argument is not None else
                     f"; it inherits the sharding of the with_sharding_constraint{line} "
                     f"{pspec_text(stated.sharding)}" if stated is not None else "")
        out.emit(
            f"{shape} is {pspec_text(p.sharding)} by propagation (no sharding was stated for it{inherited}), "
            f"which cuts {dims} uneven shards: XLA pads it and each device holds {local} "
            f"({format_bytes(p.local_bytes)}), {format_bytes(p.padding_bytes)} ({share:.0%}) of it padding beyond "
            f"an even split; a size its axes divide ({sizes}) would need no padding, but it changes what the "
            "program computes, so it is not compiled as a fix", p.source or ctx.entry_source, fix=fix, subject=shape,
            parameter=argument, suggested=next(iter(moves or restated or choices), None), ops=[value],
            constraint=ConstraintCause(source=stated.source, sharding=stated.sharding) if stated is not None else None,
            candidates=[FixCandidate(value=argument.path, sharding=m) for m in moves if argument is not None]
            + [FixCandidate(value=STATED_CONSTRAINT, sharding=m) for m in restated]
            + [FixCandidate(value=value, sharding=c) for c in choices],
        )


RULE = define_rule(SL206, Severity.warning, propagated_uneven_sharding, options=(PROPAGATED_PADDING_MIN_BYTES,
                                                                                  PROPAGATED_PADDING_MIN_SHARE),
                   traits=RuleTraits(reads_shardy_propagation=True, fix=FixKind.stated_layout,
                                     layout_edit=StatedLayoutEdit.rule_candidates))
