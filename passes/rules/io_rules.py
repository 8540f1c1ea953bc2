"""Rules over a target's arguments and results."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import is_replicated, named_sharding_text, normalized, pspec_text
from ..models.report import Severity, TensorInfo
from ..stablehlo.state_roundtrip import mismatched
from .context import RuleContext
from .registry import Emitter, RuleOption, rule


def _sharding_of(t: TensorInfo):
    return normalized(t.sharding, len(t.shape))


@rule(
    "SL201", "output-sharding-mismatch", Severity.warning,
    options=(RuleOption("output-mismatch-min-bytes", 1024**2, "bytes",
                        "per-device size from which each mismatched output is its own finding; smaller ones are "
                        "reported together in one finding"),),
)
def output_sharding_mismatch(ctx: RuleContext, out: Emitter) -> None:
    """A step's state comes back on another layout than it went in.

    What it does
    ------------
    Pairs each output with the input it corresponds to (by pytree path, or by
    position with equal shape and dtype where the structures differ) and reports
    a pair whose compiled output sharding differs from the input's sharding.
    Pairs under `output-mismatch-min-bytes` per device (norm scales, biases and
    their optimizer moments) are reported together, as one finding.

    Why is this bad
    ---------------
    Without `out_shardings`, XLA picks the output layout that is cheapest for
    this step alone. The next call of the step was lowered for the input
    layout, so every step starts by resharding its own state: collectives and
    temporary memory that appear nowhere in the source.

    Example
    -------
    ```python
    step = jax.jit(train_step)           # no out_shardings
    for batch in data:
        state = step(state, batch)       # state['w'] in as P('data', 'model'),
                                         # out as P('model')
    ```

    Fix
    ---
    Pin the outputs to the input layout: `jax.jit(train_step,
    out_shardings=...)` with the text this rule prints, or run
    `jax-shard-lint rewrite` to apply and validate it.
    """
    pairs = mismatched(ctx.roundtrips)
    floor = ctx.options["output-mismatch-min-bytes"]
    small = [rt for rt in pairs if max(rt.output.per_device_bytes, rt.input.per_device_bytes) < floor]
    small_outputs = {rt.output.index for rt in small}
    for rt in pairs:
        if rt.output.index in small_outputs:
            continue
        out.emit(
            f"output {rt.output.path} comes back as {pspec_text(rt.output.sharding)} but its input "
            f"{rt.input.path} is {pspec_text(rt.input.sharding)}: the next step reshards "
            f"{format_bytes(rt.output.per_device_bytes)} per device ({format_bytes(rt.output.bytes)} global) on entry",
            ctx.output_source(rt.output.index),
            fix=f"pin it with out_shardings: {rt.output.path} -> {named_sharding_text(rt.input.sharding)} "
            "(the target's suggested out_shardings= pins every state output)",
            subject=rt.output.path,
        )
    if small:
        # Many small outputs (norm scales, biases and their optimizer moments) are one
        # decision, and one finding, so the large state that reshards stands out.
        small.sort(key=lambda rt: (-rt.output.per_device_bytes, rt.output.index))
        sizes = sorted(rt.output.per_device_bytes for rt in small)
        shown = ", ".join(f"{rt.output.path} ({pspec_text(rt.output.sharding)}, input "
                          f"{pspec_text(rt.input.sharding)})" for rt in small[:3])
        more = f" and {len(small) - 3} more" if len(small) > 3 else ""
        span = (format_bytes(sizes[0]) if sizes[0] == sizes[-1]
                else f"{format_bytes(sizes[0])} to {format_bytes(sizes[-1])}")
        noun = "output comes" if len(small) == 1 else "small outputs come"
        out.emit(
            f"{len(small)} {noun} back on another layout than their inputs ({span} per device each, under "
            f"{format_bytes(floor)}): {shown}{more}",
            ctx.output_source(small[0].output.index),
            fix="pin them with the target's suggested out_shardings= (it pins every state output)",
            subject=small[0].output.path,
        )


@rule(
    "SL202", "missing-donation", Severity.warning,
    options=(RuleOption("donation-min-bytes", 1024**2, "bytes", "smallest per-device saving reported"),),
)
def missing_donation(ctx: RuleContext, out: Emitter) -> None:
    """An input that an output could reuse is not donated.

    What it does
    ------------
    Reports an input with the same shape, dtype and sharding as an output when
    the input is not donated and donating it would save at least
    `donation-min-bytes` per device.

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
    using the old state after the call.
    """
    limit = ctx.options["donation-min-bytes"]
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
        base = first_in.path.split("[")[0]
        leaves = f"{len(pairs)} of its arrays have" if len(pairs) > 1 else f"{first_in.path} has"
        out.emit(
            f"argument {arg} ({base}) is not donated, but {leaves} an output of the same shape, dtype and "
            f"sharding (e.g. {first_out.path}): donating it saves {format_bytes(saved)} per device",
            ctx.input_source(first_in.index), fix=f"jax.jit(..., donate_argnums=({arg},))", subject=base,
        )


@rule(
    "SL203", "replicated-argument", Severity.warning,
    options=(RuleOption("replicated-argument-bytes", 64 * 1024**2, "bytes",
                        "size at which a fully replicated argument is reported"),),
)
def replicated_argument(ctx: RuleContext, out: Emitter) -> None:
    """A large argument is replicated on every device.

    What it does
    ------------
    Reports an argument whose sharding names no mesh axis on a mesh of more than
    one device, when its size reaches `replicated-argument-bytes`.

    Why is this bad
    ---------------
    A replicated argument costs its full size on every device. With N devices
    the array is stored N times; the memory could hold a larger batch instead.

    Example
    -------
    ```python
    table = jax.ShapeDtypeStruct((65536, 4096), f32,
                                 sharding=NamedSharding(mesh, P()))
    ```

    Fix
    ---
    Shard a dimension that divides evenly by a mesh axis, e.g.
    `NamedSharding(mesh, P('data', None))`, and let the ops that need the
    whole array gather it where needed.
    """
    limit = ctx.options["replicated-argument-bytes"]
    if ctx.num_devices <= 1:
        return
    mesh = ctx.signature.mesh
    for inp in ctx.inputs:
        if not is_replicated(inp.sharding) or inp.bytes < limit:
            continue
        suggestion = None
        for name, size in sorted(mesh.axes, key=lambda a: -a[1]):
            dim = next((d for d, n in enumerate(inp.shape) if n % size == 0 and n >= size), None)
            if dim is not None:
                spec = [[] for _ in inp.shape]
                spec[dim] = [name]
                suggestion = f"NamedSharding(mesh, {pspec_text(spec)})"
                break
        out.emit(
            f"argument {inp.path} ({inp.dtype}{inp.shape}, {format_bytes(inp.bytes)}) is replicated on all "
            f"{ctx.num_devices} devices",
            ctx.input_source(inp.index),
            fix=f"shard it, e.g. {suggestion}" if suggestion else "shard one of its dimensions over a mesh axis",
            subject=inp.path,
        )
