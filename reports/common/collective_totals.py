"""A target's collectives in one figure, said as a lower bound where a loop's trip count is unknown.

XLA proves no trip count for a data-dependent ``while`` (diffrax's adaptive and checkpointed solves):
a collective in its body is counted once per run of the loops around it whose counts are known
(``Collective.count_is_lower_bound``). A newcomer's diffrax step printed "2.4 MiB per step" where its solver
ran the vector field's all-reduce 1,480 times (about 764 MiB): the total is then "at least", and says how
many collectives it undercounts (newbie16 F2)."""

from __future__ import annotations

from collections.abc import Sequence

from ...passes.common.byte_sizes import format_bytes
from ...passes.models.report import ERROR_PATH, Collective


def step_bytes(collectives: Sequence[Collective]) -> int:
    """Bytes per step per device: each collective's bytes times its count (a lower bound for some); not those only
    a failing runtime check runs (``error-path``: a step that succeeds never runs them)."""
    return sum(c.bytes * c.count for c in collectives if c.intent != ERROR_PATH)


def failing_check_text(collectives: Sequence[Collective]) -> str:
    """'; 2 only when a runtime check fails (4.0 MiB), not counted', or ''."""
    failing = [c for c in collectives if c.intent == ERROR_PATH]
    if not failing:
        return ""
    return (f"; {len(failing)} only when a runtime check fails ({format_bytes(sum(c.bytes * c.count for c in failing))}"
            "), not counted")


def in_unknown_loops(collectives: Sequence[Collective]) -> int:
    """How many collectives are counted as a lower bound: once in a loop whose trip count XLA does not know, or by
    the trips certainly taking a conditional branch data selects."""
    return sum(1 for c in collectives if c.count_is_lower_bound)


def in_data_branches(collectives: Sequence[Collective]) -> int:
    """How many collectives are in a conditional branch the program's data selects (counted by the trips
    certainly taking it)."""
    return sum(1 for c in collectives if c.count_in_branch)


def _branches_text(collectives: Sequence[Collective]) -> str:
    """'3 in conditional branches data selects, counted only on the trips certainly taking them', or ''."""
    branches = in_data_branches(collectives)
    return (f"{branches} in conditional branches data selects, counted only on the trips certainly taking them"
            if branches else "")


def assumed(collectives: Sequence[Collective]) -> int:
    """How many collectives are counted as --loop-trips says (in loops whose trip count XLA does not know)."""
    return sum(1 for c in collectives if c.count_assumed)


def upper_step_bytes(collectives: Sequence[Collective]) -> int | None:
    """Bytes per step per device were every loop whose trip count XLA does not know to run to the bound its
    condition proves; None where one of those loops has none."""
    if any(c.count_is_lower_bound and c.count_upper_bound is None for c in collectives):
        return None
    return sum(c.bytes * (c.count_upper_bound if c.count_is_lower_bound and c.count_upper_bound is not None
                          else c.count) for c in collectives if c.intent != ERROR_PATH)


def total_text(collectives: Sequence[Collective]) -> str:
    """'N ops, B per step per device', with a lower bound, XLA's upper bound, or the hint's count said."""
    hinted = assumed(collectives)
    unknown = sum(1 for c in collectives if c.count_is_lower_bound and not c.count_in_branch)
    figure = f"{format_bytes(step_bytes(collectives))} per step per device"
    failing = failing_check_text(collectives)
    branches = _branches_text(collectives)
    if hinted:
        return (f"{len(collectives)} ops, {figure} as --loop-trips counts them ({hinted} in loops whose trip count "
                f"XLA does not know, counted as the hint says, not as XLA does{'; ' if branches else ''}{branches}"
                f"{failing})")
    if not unknown and not branches:
        return f"{len(collectives)} ops, {figure}" + (f" ({failing[2:]})" if failing else "")
    upper = upper_step_bytes(collectives)
    reach = [w for w, on in (("to run to the bound its condition proves", unknown),
                             ("branch taken on every trip", branches)) if on]
    bound = (f"; at most {format_bytes(upper)} were each {' and each '.join(reach)}" if upper is not None
             else "; give --loop-trips N to count them")
    loops = (f"{unknown} in loops whose trip count XLA does not know, each counted as if its loop ran once"
             if unknown else "")
    return (f"{len(collectives)} ops, at least {figure} ({loops}{'; ' if loops and branches else ''}{branches}"
            f"{bound}{failing})")


def count_text(c: Collective) -> str:
    """A collective's runs per step: '+' where that is a lower bound ('1-448' where XLA's condition bounds it,
    '0-10?' in a branch data selects), '~' before a count --loop-trips gave."""
    if c.count_assumed:
        return f"~{c.count}"
    if c.count_is_lower_bound and c.count_upper_bound is not None:
        return f"{c.count}-{c.count_upper_bound}{'?' if c.count_in_branch else ''}"
    return f"{c.count}{'+' if c.count_is_lower_bound else ''}"
