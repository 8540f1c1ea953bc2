"""SL203 replicated-argument: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..common.byte_sizes import format_bytes
from ..common.pytree_paths import key_path as _key_path
from ..common.sharding_text import is_replicated, pspec_text
from ..models.report import Severity, TensorInfo
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
    one device, when its size reaches `replicated-argument-bytes`, or when it and
    the replicated arguments that mirror it (a parameter and its optimizer
    state: the same key path and shape) reach it together.

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
    replicated = [inp for inp in ctx.inputs if is_replicated(inp.sharding)]
    mirrors = _mirrors(replicated)
    for inp in replicated:
        together = sum(t.bytes for t in mirrors[inp.index])
        if together < limit:
            continue
        spec = _spread(inp.shape, list(mesh.axes))
        # A parameter and its optimizer state are one decision (one finding once grouped by cause), so one
        # under the size alone counts with the rest: a 29.8 MiB embedding and its two Adam moments are 89.4 MiB.
        alone = "" if inp.bytes >= limit else (
            f" (with the {len(mirrors[inp.index]) - 1} replicated values of its key path and shape, "
            f"{format_bytes(together)})")
        out.emit(
            f"argument {inp.path} ({inp.dtype}{inp.shape}, {format_bytes(inp.bytes)}) is replicated on all "
            f"{ctx.num_devices} devices{alone}",
            ctx.input_source(inp.index),
            # lint compiles the suggestion before it is shown (its fix check), with the optimizer state alike.
            fix=(f"shard {inp.path} as {pspec_text(spec)}" if spec is not None
                 else "shard one of its dimensions over a mesh axis"),
            subject=inp.path, parameter=inp, suggested=spec,
        )


def _mirrors(replicated: list[TensorInfo]) -> dict[int, list[TensorInfo]]:
    """Each replicated argument's group: those of its shape and dtype whose key paths end with the same
    shortest one (``params['emb']``, ``opt_state[0].mu['emb']`` and ``opt_state[0].nu['emb']`` end with
    ``['emb']``), as group_by_cause groups their findings."""
    keys = {t.index: _key_path(t.path) for t in replicated}
    groups: dict[tuple[object, ...], list[TensorInfo]] = {}
    anchor_of: dict[int, tuple[object, ...]] = {}
    for t in replicated:
        own = keys[t.index]
        alike = [keys[o.index] for o in replicated if o.shape == t.shape and o.dtype == t.dtype
                 and keys[o.index] and own.endswith(keys[o.index])]
        anchor = (min(alike, key=len) if own and alike else t.path, tuple(t.shape), t.dtype)
        anchor_of[t.index] = anchor
        groups.setdefault(anchor, []).append(t)
    return {i: groups[a] for i, a in anchor_of.items()}


RULE = define_rule(SL203, Severity.warning, replicated_argument,
                   options=(REPLICATED_ARGUMENT_BYTES,),
                   traits=RuleTraits(fix=FixKind.parameter, argument_layout=True, about_state=True,
                                     other_dimension=True))
