"""SL104 involuntary-full-rematerialization: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.shapes import array_bytes
from ..common.sharding_text import pspec_text
from ..hlo.involuntary_remat import LocatedRemat
from ..models.fix_check import StatedLayoutEdit
from ..models.report import ArrayType, FixCandidate, Severity, TensorInfo
from ..models.rule_codes import SL104
from .context import RuleContext
from .registry import Emitter, FixKind, RuleTraits, define_rule


def involuntary_full_rematerialization(ctx: RuleContext, out: Emitter) -> None:
    """A layout change XLA can only make by replicating the whole value on every device.

    What it does
    ------------
    Reports each value for which XLA's SPMD partitioner printed "Involuntary full
    rematerialization" while compiling the step: it found no collective that
    takes the value from its sharding to the one the op at this line needs, so it
    gathers the whole value onto every device and slices it again. The finding
    is at the op that reads the rebuilt value, names both layouts and says what
    each device then holds.

    Why is this bad
    ---------------
    The partitioner's last resort costs the whole array in memory on every
    device and an all-gather of all of it, at every execution, whatever the size
    of the change asked for. It is XLA's own statement that the shardings on the
    two sides of an op do not fit together; it is printed on stderr among other
    logs and easy to miss until the step runs out of memory at scale.

    Example
    -------
    ```python
    x = jax.ShapeDtypeStruct((16, 64, 32), f32, sharding=NamedSharding(mesh, P("y", None, "x")))
    y = jax.lax.with_sharding_constraint(jnp.sin(x), P(None, ("x", "y"), None))
    ```

    Fix
    ---
    Change one axis at a time, each step one that a single collective makes
    (here first `P("y", "x", None)`: x moves to dimension 1, an all-to-all; then
    `P(None, ("x", "y"), None)`: y joins it, another all-to-all), with
    `jax.sharding.reshard` or `jax.lax.with_sharding_constraint`. lint
    compiles those steps (a constraint for each, before the constraint or the
    out_shardings that asks for the layout) and shows them only when it
    measures less traffic or a lower peak. Where nothing in the program
    states the layout asked for (no constraint, no out_shardings: another
    argument's sharding carried by propagation), there is no op to stage it
    before, and the staged layouts are printed as advice with that reason.
    Where the change has no layout on the way, giving the producer and the
    consumer the same layout is advice lint does not compile. Where one side
    is a value one device holds (a host callback's operand or result:
    `jax.pure_callback`, equinox's `error_if` and so diffrax's runtime
    checks), the finding says so: the callback is what to change. Where an
    argument's split reaches the callback's reader through propagation (a
    diffrax solve's observations with their time axis on a mesh axis), the
    finding names that argument, and lint compiles it without that split,
    printed as the fix only when measured better.
    """
    for located in ctx.involuntary_remats:
        r = located.remat
        whole = array_bytes(r.dtype, list(r.global_shape))
        value = _value_name(ctx, r.op_name, r.instruction)
        on_one = r.source_device is not None or r.target_device is not None
        layouts = (f"from {_side(r.source_sharding, r.source_device)} to {_side(r.target_sharding, r.target_device)} "
                   if r.source_sharding is not None and r.target_sharding is not None else "")
        # A value one device holds has no layout on the way to stage: it is a host callback's (or an op
        # placed on one device), and the callback is what to change.
        stages = (staged_layouts(r.source_sharding, r.target_sharding)
                  if r.source_sharding is not None and r.target_sharding is not None and not on_one else [])
        # The staged layouts are a fix the fix checks compile (layout_fix_checks.py: the intermediate
        # constraints inserted, in order, before the reader's); printed as the fix only when measured better.
        staged = len(stages) > 1
        fix = ("reshard it one axis at a time, each step one all-to-all or slice: "
               + " then ".join(f"jax.sharding.reshard(..., {pspec_text([list(d) for d in stage])})"
                               for stage in stages)
               + " (or with_sharding_constraint on an Auto mesh)"
               if staged else _ONE_DEVICE_FIX if on_one else
               "no fix compiled: the change has no intermediate layout to make it through "
               "(advice, not checked: give the value's producer and its reader one layout)")
        candidates = [FixCandidate(value=f"staged_layout[{i}]", sharding=[list(d) for d in stage])
                      for i, stage in enumerate(stages)] if staged else None
        rebuilt = ArrayType(dtype=r.dtype, shape=list(r.global_shape))
        shape = str(rebuilt)
        # The argument whose split propagation carries to the reader (callback_splits.py): named, and that
        # argument without the axes compiled as the one candidate (layout_fix_checks.py: printed only if better).
        held = _split_argument(ctx, located) if on_one else None
        reaches, without = "", None
        if held is not None:
            t, dim, without = held
            axes = ", ".join(t.sharding[dim])  # type: ignore[index]
            reaches = (f"; the reader's split comes from {t.path} {pspec_text(t.sharding)}: propagation carries its "
                       f"dimension {dim}'s split on {axes} to it")
            candidates = [FixCandidate(value=t.path, sharding=without)]
        out.emit(
            f"XLA cannot reshard {shape}{value} {layouts}with a collective: it replicates "
            f"the whole value on every device ({format_bytes(whole)} each) and slices it again "
            "(\"Involuntary full rematerialization\")" + (_ONE_DEVICE_TEXT if on_one else "") + reaches,
            located.source, via=located.via, fix=fix, subject=located.collective or r.instruction,
            total_bytes=whole, candidates=candidates, rematerialized_value=rebuilt,
            parameter=held[0] if held is not None else None,
        )


Layout = tuple[tuple[str, ...], ...]

_ONE_DEVICE_TEXT = ("; one side is one device's value, as a host callback's operand or result is (jax.pure_callback, "
                    "io_callback, equinox's error_if and so diffrax's runtime checks)")
_ONE_DEVICE_FIX = ("no fix compiled: a host callback runs on one device, and XLA moves its operand there and its "
                   "result back whole (advice, not checked: leave the callback out of the step where it is a check, "
                   "diffrax's diffeqsolve(..., throw=False) or EQX_ON_ERROR=nan for equinox's error_if, or give "
                   "its operand and result no sharding, P(), where they are read)")


def _split_argument(ctx: RuleContext, located: LocatedRemat) -> tuple[TensorInfo, int, list[list[str]]] | None:
    """The argument whose split reaches a one-device value's reader, its dimension, and its sharding without
    that dimension's axes; None where none is known or nothing would be left to change."""
    if located.argument is None:
        return None
    index, dim = located.argument
    t = next((t for t in ctx.inputs if t.index == index), None)
    if t is None or not t.sharding or dim >= len(t.sharding) or not t.sharding[dim]:
        return None
    # Every dimension written (the module's sharding has the argument's rank); said as P('data').
    without = [[] if d == dim else list(axes) for d, axes in enumerate(t.sharding)]
    return t, dim, without + [[] for _ in range(len(t.shape) - len(without))]


def _side(axes: Layout, device: int | None) -> str:
    """A side of the change: its PartitionSpec, or the one device that holds the whole value."""
    return f"device {device} alone" if device is not None else pspec_text([list(d) for d in axes])


def staged_layouts(src: Layout, dst: Layout) -> list[Layout]:
    """Layouts from ``src`` to ``dst`` that each move one axis to its place in ``dst`` (an all-to-all
    between dimensions, or a slice for an axis new to the value), then drop what ``dst`` lacks (an
    all-gather of only those axes): the path the partitioner did not find in one step."""
    current = [list(d) for d in src] + [[] for _ in range(len(dst) - len(src))]
    stages: list[Layout] = []
    for d, want in enumerate(dst):
        for k, axis in enumerate(want):
            if current[d][k:k + 1] == [axis]:
                continue
            for axes in current:
                if axis in axes:
                    axes.remove(axis)
            current[d].insert(min(k, len(current[d])), axis)
            stages.append(tuple(tuple(a) for a in current))
    final = tuple(tuple(d) for d in dst)
    if not stages or stages[-1] != final:
        stages.append(final)
    return stages


def _value_name(ctx: RuleContext, op_name: str | None, instruction: str) -> str:
    """`` (argument params['w'])`` when the value is an argument as passed, else nothing."""
    if op_name and "/" not in op_name and instruction.startswith("param"):
        return f" (argument {op_name})"
    return ""


RULE = define_rule(SL104, Severity.warning, involuntary_full_rematerialization,
                   traits=RuleTraits(fix=FixKind.stated_layout, layout_edit=StatedLayoutEdit.staged,
                                     argument_layout=True, rematerialization=True,
                                     claims=lambda ctx: [r.collective for r in ctx.involuntary_remats if r.collective]))
