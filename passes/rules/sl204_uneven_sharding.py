"""SL204 uneven-sharding: the check, whose docstring is the rule's documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..models.fix_check import StatedLayoutEdit
from ..models.report import Severity
from ..models.rule_codes import SL204
from ..stablehlo.sharding_constraints import even_alternatives
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

PADDING_MIN_BYTES = RuleOption(
    "padding-min-bytes", 0, OptionKind.bytes,
    "smallest per-device padding reported")


def constraint_path(ordinal: int) -> str:
    """How a finding names a constrained value: the fix check edits the constraint of this number."""
    return f"sharding_constraint[{ordinal}]"


def uneven_sharding(ctx: RuleContext, out: Emitter) -> None:
    """A value is sharded on a dimension its mesh axes do not divide, and XLA pads it.

    What it does
    ------------
    Reports a `with_sharding_constraint` (or `jax.device_put` inside jit) whose
    PartitionSpec cuts a dimension of n elements into k shards where k does
    not divide n, when the compiled program holds the value at the padded
    per-device shape ceil(n/k) and the padding each device holds beyond an
    even split is at least `padding-min-bytes` (0: any). The message gives
    that shape, the padding bytes, and the user's line.

    Why is this bad
    ---------------
    XLA's SPMD partitioner pads the dimension to k * ceil(n/k): every device
    holds ceil(n/k) rows, some of them padding, and the program pads, slices
    and masks (a `select` before each reduction) to keep the padding out of
    the results. A batch of 12 on 8 devices is 16 rows of memory and work.
    `jit` refuses such a sharding for arguments and results (in_shardings,
    out_shardings and placed inputs: "does not evenly divide"), so what
    reaches XLA is a constraint on a value inside the function. XLA pads it
    on CPU, GPU and TPU alike; a value whose padded shape the compiled program
    does not hold (fused away) is not reported.

    Example
    -------
    ```python
    h = x @ w                                            # x: [12, 8192]
    h = jax.lax.with_sharding_constraint(h, P(('data', 'model')))  # 12 rows on 8 devices
    ```

    Fix
    ---
    Shard a dimension the axes divide (`P(None, ('data', 'model'))`), keep
    only the axes that divide it (`P('data')` for 12 on a 4 x 2 mesh), or
    choose a size the axes divide. Each is compiled and printed only when
    measured better.
    """
    limit = ctx.option(PADDING_MIN_BYTES)
    mesh = ctx.signature.mesh
    for p in ctx.padded_values:
        c = p.constraint
        if p.padding_bytes < limit:
            continue
        spec = pspec_text(c.sharding)
        ways = c.ways(mesh)
        dims = ", ".join(f"dimension {d} ({c.shape[d]}) into {ways[d]}" for d in p.uneven_dims)
        shape = f"{p.dtype}[{','.join(map(str, c.shape))}]"
        local = f"{p.dtype}[{','.join(map(str, p.local_shape))}]"
        share = p.padding_bytes / p.local_bytes
        choices = even_alternatives(c.shape, c.sharding, mesh)
        path = constraint_path(c.ordinal)
        fix = (f"constrain it as {pspec_text(choices[0])}, whose axes divide every dimension"
               if choices else "choose a size the axes divide (or shard another dimension)")
        out.emit(
            f"{shape} is constrained to {spec}, which cuts {dims} uneven shards: XLA pads it "
            f"and each device holds {local} ({format_bytes(p.local_bytes)}), {format_bytes(p.padding_bytes)} "
            f"({share:.0%}) of it padding beyond an even split",
            c.source or ctx.entry_source, fix=fix, subject=path,
            suggested=choices[0] if choices else None,
        )


RULE = define_rule(SL204, Severity.warning, uneven_sharding,
                   options=(PADDING_MIN_BYTES,),
                   traits=RuleTraits(fix=FixKind.stated_layout,
                                     layout_edit=StatedLayoutEdit.even_constraint))
