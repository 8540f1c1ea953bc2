"""SL202 missing-donation: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.pytree_paths import argument_name
from ..common.sharding_text import normalized
from ..models.report import Severity, TensorInfo
from ..models.rule_codes import SL202
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

DONATION_MIN_BYTES = RuleOption(
    "donation-min-bytes", 1024**2, OptionKind.bytes,
    "smallest per-device saving reported")


def _sharding_of(t: TensorInfo) -> tuple[tuple[str, ...], ...] | None:
    return normalized(t.sharding, len(t.shape))


def missing_donation(ctx: RuleContext, out: Emitter) -> None:
    """An input that an output could reuse is not donated.

    What it does
    ------------
    Reports an input with the same shape, dtype and sharding as an output when
    the input is not donated and donating it would save at least
    `donation-min-bytes` per device, at the `jax.jit(...)` call where
    `donate_argnums` is added (where the script shows which call made the lowered
    function; else at the line that lowers or calls it, which is otherwise its
    via), the argument's first use named in the message.

    Why is this bad
    ---------------
    Without donation XLA must keep the input alive while it writes the output,
    so the state is held twice at the peak. Donating lets the output reuse the
    input's buffer.

    Example
    -------
    ```python
    step = jax.jit(train_step)   # state in, new state out, state not donated
    ```

    Fix
    ---
    `jax.jit(train_step, donate_argnums=(0,))` (or `donate_argnames=`), and stop
    using the old state after the call. XLA reuses a donated buffer only for an
    output on the same layout: where the step returns its state on other layouts
    and SL201's fix is printed, the donation is checked on top of that fix.
    """
    limit = ctx.option(DONATION_MIN_BYTES)
    candidates = {rt.input.index: rt.output for rt in ctx.roundtrips}

    def same_layout(o: TensorInfo, inp: TensorInfo) -> bool:
        return o.shape == inp.shape and o.dtype == inp.dtype and _sharding_of(o) == _sharding_of(inp)

    def partner(inp: TensorInfo, taken: set[int]) -> TensorInfo | None:
        match = candidates.get(inp.index)
        if match is not None and match.index not in taken and same_layout(match, inp):
            return match
        return next((o for o in ctx.outputs if o.index not in taken and same_layout(o, inp)), None)

    # Outputs that already reuse a donated input's buffer are not on offer.
    taken: set[int] = set()
    for inp in ctx.inputs:
        if inp.donated and (match := partner(inp, taken)) is not None:
            taken.add(match.index)
    per_arg: dict[int, list[tuple[TensorInfo, TensorInfo]]] = {}
    for inp in ctx.inputs:
        if inp.donated or (match := partner(inp, taken)) is None:
            continue
        taken.add(match.index)
        per_arg.setdefault(ctx.signature.input_keys[inp.index][0], []).append((inp, match))
    for arg, pairs in sorted(per_arg.items()):
        saved = sum(inp.per_device_bytes for inp, _ in pairs)
        if saved < limit:
            continue
        first_in, first_out = pairs[0]
        base = argument_name(first_in.path)
        leaves = f"{len(pairs)} of its arrays have" if len(pairs) > 1 else f"{first_in.path} has"
        # The line the user edits is the jit or lower call (where donate_argnums goes); the argument's
        # first use inside the step is context, said in the message.
        first_use = ctx.input_source(first_in.index)
        source = ctx.call_site or first_use
        used = ""
        if first_use is not None and source is not None and source is not first_use:
            used = (f"; {base} is first used at line {first_use.line}" if first_use.file == source.file
                    else f"; {base} is first used at {ctx.where(first_use, None)}")
        out.emit(
            f"argument {arg} ({base}) is not donated, but {leaves} an output of the same shape, dtype and "
            f"sharding (e.g. {first_out.path}): donating it lets those outputs reuse up to "
            f"{format_bytes(saved)} per device of its buffers{used}",
            source, fix=f"jax.jit(..., donate_argnums=({arg},))", subject=base,
        )


RULE = define_rule(SL202, Severity.warning, missing_donation,
                   options=(DONATION_MIN_BYTES,), traits=RuleTraits(fix=FixKind.donation))
