"""SL205 unusable-donation: the check, whose docstring is the rule's documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import normalized, pspec_text
from ..models.fix_check import StatedLayoutEdit
from ..models.report import Severity, TensorInfo
from ..models.rule_codes import SL205
from .context import RuleContext
from .registry import Emitter, FixKind, RuleTraits, define_rule
from .sl202_missing_donation import DONATION_MIN_BYTES  # one threshold for both donation rules


def _text(t: TensorInfo) -> str:
    return f"{t.dtype}[{','.join(map(str, t.shape))}]"


def unusable_donation(ctx: RuleContext, out: Emitter) -> None:
    """A donated argument's buffer is reused by no output.

    What it does
    ------------
    Reports an argument the user donated (`donate_argnums`/`donate_argnames`)
    whose buffer the compiled program does not alias to any output (it is not
    in the compiled module's `input_output_alias`), when it holds at least
    `donation-min-bytes` per device. The message says why: no output has its
    shape and dtype (a dtype change), or the one that does comes out on
    another sharding (so its per-device buffer differs), or every output of
    its layout already reuses another donated buffer.

    Why is this bad
    ---------------
    The donation buys nothing: the output is written into a new buffer, so the
    step holds both at the peak, and the caller has still given the array up
    (JAX warns "Some donated buffers were not usable" and deletes it). jit
    drops a donation whose output has another sharding before XLA sees it;
    XLA drops the rest (its `buffer_donor` list).

    Example
    -------
    ```python
    step = jax.jit(update, donate_argnums=(0,),
                   out_shardings=NamedSharding(mesh, P('model')))  # state in on P('data')
    ```

    Fix
    ---
    Return the new value on the donated input's sharding (`out_shardings=`
    matching its in_shardings), or in its dtype (the output cast back where
    the step returns it, with the donation kept); each is compiled and printed
    only when measured better. Otherwise, stop donating it: the program
    without the donation is compiled too (its `jax.buffer_donor` or
    `tf.aliasing_output` taken off), printed as the fix only when measured
    better; where it measures no change, the finding says so with the
    figures (the donation buys the step nothing).
    """
    if ctx.aliased_inputs is None:
        return
    limit = ctx.option(DONATION_MIN_BYTES)
    returned = {rt.input.index: rt.output for rt in ctx.roundtrips}
    for inp in ctx.inputs:
        if inp.index not in ctx.donated_inputs or inp.index in ctx.aliased_inputs or inp.per_device_bytes < limit:
            continue
        layout = normalized(inp.sharding, len(inp.shape))
        same = [o for o in ctx.outputs if o.shape == inp.shape and o.dtype == inp.dtype]
        other = [o for o in same if normalized(o.sharding, len(o.shape)) != layout]
        # The output that is this input coming back (its pytree path) is the one to pin: the first of its
        # shape and dtype may be another state value's (params.head beside params.embed, mu beside params).
        partner = returned.get(inp.index)
        if partner is not None and partner in other:
            other = [partner]
            same = other
        suggested = None
        if not same:
            shaped = next((o for o in ctx.outputs if o.shape == inp.shape), None)
            why = (f"no output is {_text(inp)}: {shaped.path} has its shape as {shaped.dtype}" if shaped
                   else f"no output is {_text(inp)}")
            # The fix check compiles it (the output cast back to the input's dtype where the step returns it).
            fix = (f"return {inp.path} as {inp.dtype} for XLA to write into it, or drop it from donate_argnums: "
                   "no output can reuse it")
        elif len(other) == len(same):
            o = other[0]
            why = (f"{o.path} has its shape and dtype but comes out as {pspec_text(o.sharding)} "
                   f"({format_bytes(o.per_device_bytes)} per device), not on its {pspec_text(inp.sharding)}")
            fix = f"pin {o.path} with out_shardings to {pspec_text(inp.sharding)}, the donated input's sharding"
            suggested = inp.sharding or []
        else:
            why = "each output of its layout already reuses another donated buffer"
            fix = "drop it from donate_argnums: no output is left for it"
        out.emit(
            f"{inp.path} is donated, but no output reuses its {format_bytes(inp.per_device_bytes)} per device: "
            f"{why}", ctx.input_source(inp.index), fix=fix, subject=inp.path, parameter=inp,
            suggested=suggested,
        )


RULE = define_rule(SL205, Severity.warning, unusable_donation,
                   traits=RuleTraits(fix=FixKind.stated_layout, layout_edit=StatedLayoutEdit.donation))
