"""SL105's findings about resharding collectives each under `unexplained-reshard-bytes` that one cause makes
many of: the same kind over the same mesh axes (the arguments split on those axes), whose bytes per step
reach the threshold together, said at the first of their lines.

jax-cfd's finite-volume solver pads its velocity periodically (``jnp.pad(mode='wrap')`` in its boundary
conditions) on the dimension the domain is split on; XLA moves each device's whole shard to another
dimension with an all-to-all to pad it, 512 KiB at a time, 63 times a step: 36.9 MiB per step that were
only a summary line (issue 46, cfd14 F10). One finding names the arguments sharded on those axes (the
fields the padded values come from) and moves them off the dimension the axes split, as the fix to compile
(the fix checks print it only measured better, else what it cost); what XLA does at a periodic pad and the
halo exchange that avoids it are said in the message.
"""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..common.collective_values import value_count, values_text
from ..common.sharding_text import pspec_text
from ..models.report import Collective, TensorInfo
from .context import RuleContext
from .parameter_advice import moved_off

# The end of a finding's message where no argument reaches the collective's operand; finding_provenance.py
# replaces it where the propagation chain begins at one.
NO_ARGUMENT = ": no argument of the step is its operand or the weight it serves"

# A group's key: kind, mesh axes.
Key = tuple[str, tuple[str, ...]]


def small_reshard_groups(ctx: RuleContext, limit: int) -> dict[Key, list[Collective]]:
    """The unclaimed resharding collectives each under ``limit``, grouped by cause, where a group of two or more
    reaches ``limit`` per step together."""
    groups: dict[Key, list[Collective]] = {}
    for c in ctx.collectives:
        if c.intent == "reshard" and c.hlo_name not in ctx.claimed_collectives and c.bytes * c.count < limit \
                and c.source is not None:
            groups.setdefault((c.kind, tuple(c.mesh_axes)), []).append(c)
    return {k: g for k, g in groups.items() if len(g) > 1 and sum(c.bytes * c.count for c in g) >= limit}


def _held_on(ctx: RuleContext, axes: set[str]) -> list[TensorInfo]:
    return [t for t in ctx.inputs if any(a.split(":")[0] in axes for dim in (t.sharding or []) for a in dim)]


def group_finding(ctx: RuleContext, key: Key, group: list[Collective],
                  ) -> tuple[str, str, list[TensorInfo], list[list[str]] | None]:
    """(message, fix, the arguments it names: those sharded on its axes, the first with the layout the others
    share; their new layout or None)."""
    kind, axes = key
    bare = {a.split(":")[0] for a in axes}
    held = _held_on(ctx, bare)
    first = held[0] if held else None
    named = [t for t in held if first is not None and t.sharding == first.sharding and t.shape == first.shape]
    dims = {d for d, on in enumerate(first.sharding or []) if any(a.split(":")[0] in bare for a in on)} \
        if first is not None else set()
    suggested = moved_off(first, dims, dict(ctx.signature.mesh.axes)) if first is not None else None
    total = sum(c.bytes * c.count for c in group)
    count = sum(c.count for c in group)
    largest = max(group, key=lambda c: c.bytes)
    axes_text = ", ".join(axes) or "all devices"
    pad = any("pad" in (c.op_name or "") for c in group)
    names = " and ".join(t.path for t in named)
    lines = sorted({c.source.line for c in group if c.source is not None})
    at = (f"at lines {', '.join(map(str, lines[:-1]))} and {lines[-1]}" if len(lines) > 1
          else "at this line")
    # The largest may be a tuple (XLA's combiner): then its values are listed, and its bytes are all of them.
    up_to = ("values of up to " if value_count(largest) == 1 else "up to ") + values_text(largest)
    message = (f"{len(group)} {kind}s over {axes_text} {at} reshard {up_to} "
               f"({format_bytes(largest.bytes)}), {count}x per step, {format_bytes(total)} per step "
               "in all, which no stated sharding asked for (each under unexplained-reshard-bytes, together over it)"
               + (": a periodic pad (jnp.pad mode='wrap', or a roll) of a dimension split on "
                  f"{axes_text}, which XLA pads by moving each device's whole shard to another dimension and back "
                  "(a halo exchange, the pad's rows passed to the neighbouring device with jax.lax.ppermute under "
                  "jax.shard_map, moves those rows alone; it rewrites the pad, so it is not compiled here)"
                  if pad and kind == "all-to-all" else
                  f": a periodic pad (jnp.pad mode='wrap', or a roll) of a dimension split on {axes_text}, whose "
                  "wrapped rows XLA sends between devices" if pad else "")
               + (f"; they come from {names} {pspec_text(first.sharding or [])}" if first is not None else ""))
    if first is not None and suggested is not None:
        fix = f"shard {names} as {pspec_text(suggested)} instead of {pspec_text(first.sharding or [])}"
    else:
        fix = ("exchange the halo rows the pad needs under jax.shard_map with jax.lax.ppermute, or shard a "
               "dimension the pad does not wrap" if pad else
               "state the layout the op reads the value in (jax.lax.with_sharding_constraint), or shard the "
               "argument it comes from on a dimension the op does not read along")
    return message, fix, named, suggested
