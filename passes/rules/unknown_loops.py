"""Collectives in loops whose trip count XLA does not know, for the rules that judge bytes per step.

Such a collective is counted once per run of the loops around it (``Collective.count_is_lower_bound``): a
threshold judged by that count filtered a diffrax step's in-loop reshards out as 264 KiB where the solver ran
them hundreds of times (newbie16 F2). Where the loop's condition proves a bound (``counter < N`` AND-ed with
the data-dependent test), the bytes at that bound are an upper figure the rules judge by as well; where none is
proved, the rules cannot judge and say so. With ``--loop-trips`` the counts are the user's and are judged as
any count is."""

from __future__ import annotations

from collections.abc import Sequence

from ..common.byte_sizes import format_bytes
from ..common.word_lists import listed
from ..models.report import Collective


def bound_bytes(c: Collective) -> int | None:
    """A collective's bytes per step were its loops to run to the bound their conditions prove (its bytes
    per step where its count is XLA's or the user's); None where a loop around it has no bound."""
    if not c.count_is_lower_bound:
        return c.bytes * c.count
    return None if c.count_upper_bound is None else c.bytes * c.count_upper_bound


def may_reach(c: Collective, limit: int) -> bool:
    """Under ``limit`` as counted, but counted once in a loop whose trip count XLA does not know, and at
    its loop's bound (or with no bound proved) it may reach the limit."""
    upper = bound_bytes(c)
    return c.count_is_lower_bound and c.bytes * c.count < limit and (upper is None or upper >= limit)


def range_text(group: Sequence[Collective]) -> str:
    """'at least 64.0 KiB per step per device, up to 28.0 MiB at the bound of 448 runs per step its loop's condition
    proves', or 'at least 64.0 KiB per step per device (a loop around it has no bound XLA proves)'."""
    once = sum(c.bytes * c.count for c in group)
    uppers = [bound_bytes(c) for c in group]
    if any(u is None for u in uppers):
        them = "them" if len(group) > 1 else "it"
        return f"at least {format_bytes(once)} per step per device (a loop around {them} has no bound XLA proves)"
    runs = sorted({c.count_upper_bound for c in group if c.count_upper_bound is not None})
    bound = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
    whose = "their loops' conditions prove" if len(group) > 1 else "its loop's condition proves"
    upper = format_bytes(sum(u for u in uppers if u is not None))
    return (f"at least {format_bytes(once)} per step per device, up to {upper} at the bound of {bound} runs per step "
            f"{whose}")


def named(group: Sequence[Collective]) -> str:
    """'all-gather.12 (node_step.py:25), ...': which collectives, at which lines (the first four)."""
    items = [f"{c.hlo_name}" + (f" ({c.source.file.rsplit('/', 1)[-1]}:{c.source.line})" if c.source else "")
             for c in sorted(group, key=lambda c: (-(bound_bytes(c) or 0), c.hlo_name))]
    return listed(items[:4] + ([f"{len(items) - 4} more"] if len(items) > 4 else []))
