"""SL203 replicated-argument: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import is_replicated, pspec_text
from ..models.report import Severity
from ..models.rule_codes import SL203
from .context import RuleContext
from .registry import Emitter, FixKind, OptionKind, RuleOption, RuleTraits, define_rule

REPLICATED_ARGUMENT_BYTES = RuleOption(
    "replicated-argument-bytes", 64 * 1024**2, OptionKind.bytes,
    "size at which a fully replicated argument is reported")


def _spread(shape: Sequence[int], axes: list[tuple[str, int]]) -> list[list[str]] | None:
    """The layout that spreads the argument over the most devices: the mesh axes (in the mesh's order) whose
    product divides a dimension, the largest such product first, on the first dimension it divides. A
    replicated table gathered along its rows measures best on both axes of its columns (fix_checks tries
    the other dimension): one axis leaves half its bytes or more on every device."""
    subsets = [[a for a, keep in zip(axes, mask) if keep] for mask in itertools.product((1, 0), repeat=len(axes))]
    for chosen in sorted(subsets, key=lambda s: -math.prod(n for _, n in s)):
        size = math.prod(n for _, n in chosen)
        dim = next((d for d, n in enumerate(shape) if n % size == 0 and n >= size), None)
        if chosen and size > 1 and dim is not None:
            spec: list[list[str]] = [[] for _ in shape]
            spec[dim] = [name for name, _ in chosen]
            return spec
    return None


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
    limit = ctx.option(REPLICATED_ARGUMENT_BYTES)
    if ctx.num_devices <= 1:
        return
    mesh = ctx.signature.mesh
    for inp in ctx.inputs:
        if not is_replicated(inp.sharding) or inp.bytes < limit:
            continue
        spec = _spread(inp.shape, list(mesh.axes))
        out.emit(
            f"argument {inp.path} ({inp.dtype}{inp.shape}, {format_bytes(inp.bytes)}) is replicated on all "
            f"{ctx.num_devices} devices",
            ctx.input_source(inp.index),
            # lint compiles the suggestion before it is shown (its fix check), with the optimizer state alike.
            fix=(f"shard {inp.path} as {pspec_text(spec)}" if spec is not None
                 else "shard one of its dimensions over a mesh axis"),
            subject=inp.path, parameter=inp, suggested=spec,
        )


RULE = define_rule(SL203, Severity.warning, replicated_argument,
                   options=(REPLICATED_ARGUMENT_BYTES,),
                   traits=RuleTraits(fix=FixKind.parameter, argument_layout=True, about_state=True,
                                     other_dimension=True))
