"""A target's collectives in one figure, said as a lower bound where a loop's trip count is unknown.

XLA proves no trip count for a data-dependent ``while`` (diffrax's adaptive and checkpointed solves):
a collective in its body is counted once per run of the loops around it whose counts are known
(``Collective.count_is_lower_bound``). A newcomer's diffrax step printed "2.4 MiB per step" where its solver
ran the vector field's all-reduce 1,480 times (about 764 MiB): the total is then "at least", and says how
many collectives it undercounts (newbie16 F2)."""

from __future__ import annotations

from collections.abc import Sequence

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.report import Collective


def step_bytes(collectives: Sequence[Collective]) -> int:
    """Bytes per step per device: each collective's bytes times its count (a lower bound for some)."""
    return sum(c.bytes * c.count for c in collectives)


def in_unknown_loops(collectives: Sequence[Collective]) -> int:
    """How many collectives run in a loop whose trip count XLA does not know."""
    return sum(1 for c in collectives if c.count_is_lower_bound)


def total_text(collectives: Sequence[Collective]) -> str:
    """'N ops, B per step per device', or 'N ops, at least B per step per device (K in loops ...)'."""
    unknown = in_unknown_loops(collectives)
    figure = f"{len(collectives)} ops, {format_bytes(step_bytes(collectives))} per step per device"
    if not unknown:
        return figure
    return (f"{len(collectives)} ops, at least {format_bytes(step_bytes(collectives))} per step per device "
            f"({unknown} in loops whose trip count XLA does not know, each counted as if its loop ran once)")


def count_text(c: Collective) -> str:
    """A collective's runs per step, '+' where that is a lower bound."""
    return f"{c.count}{'+' if c.count_is_lower_bound else ''}"
