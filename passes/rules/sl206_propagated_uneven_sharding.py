"""SL206 propagated-uneven-sharding: the check, whose docstring is the rule's documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..models.report import Severity
from ..models.rule_codes import SL206
from ..stablehlo.sharding_constraints import even_alternatives
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

PROPAGATED_PADDING_MIN_BYTES = RuleOption(
    "propagated-padding-min-bytes", 0, OptionKind.bytes,
    "smallest per-device padding of a propagated uneven sharding reported")


def propagated_value_path(op_index: int, result: int) -> str:
    """How a finding names a propagated value: the fix check constrains result ``result`` of the op at
    ``op_index`` in the module's walk."""
    return f"propagated_value[{op_index}][{result}]"


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
    at least `propagated-padding-min-bytes` (0: any). One finding per user line.

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
    State a sharding whose axes divide it (`with_sharding_constraint` on the
    value, the uneven axes moved to a dimension they divide, or only the axes
    that divide it kept): each is inserted on the value in the program,
    compiled and printed only when measured better, as SL204's. Making the
    dimension a multiple of its shards (pad to 24 rows, not 20) also ends the
    padding, but it changes the program's values, so the message names the
    size and nothing compiles it as a fix.
    """
    limit = ctx.option(PROPAGATED_PADDING_MIN_BYTES)
    mesh = ctx.signature.mesh
    for p in ctx.propagated_padding:
        if p.padding_bytes < limit:
            continue
        shape = f"{p.dtype}[{','.join(map(str, p.shape))}]"
        local = f"{p.dtype}[{','.join(map(str, p.local_shape))}]"
        dims = ", ".join(f"dimension {d} ({p.shape[d]}) into {p.ways[d]}" for d in p.uneven_dims)
        sizes = ", ".join(f"dimension {d} of {-(-p.shape[d] // p.ways[d]) * p.ways[d]}" for d in p.uneven_dims)
        choices = even_alternatives(p.shape, p.sharding, mesh)
        share = p.padding_bytes / p.local_bytes
        # A size the axes divide changes the program's values: named in the message, never compiled as a fix.
        fix = (f"constrain it with jax.lax.with_sharding_constraint to {pspec_text(choices[0])}, whose axes "
               "divide every dimension" if choices else None)
        out.emit(
            f"{shape} is {pspec_text(p.sharding)} by propagation (no sharding was stated for it), "
            f"which cuts {dims} uneven shards: XLA pads it and each device holds {local} "
            f"({format_bytes(p.local_bytes)}), {format_bytes(p.padding_bytes)} ({share:.0%}) of it padding beyond "
            f"an even split; a size its axes divide ({sizes}) would need no padding, but it changes what the "
            "program computes, so it is not compiled as a fix", p.source or ctx.entry_source, fix=fix, subject=shape,
            suggested=choices[0] if choices else None, ops=[propagated_value_path(p.op_index, p.result)],
        )


RULE = define_rule(SL206, Severity.warning, propagated_uneven_sharding, options=(PROPAGATED_PADDING_MIN_BYTES,),
                   traits=RuleTraits(reads_shardy_propagation=True, fix=FixKind.stated_layout))
