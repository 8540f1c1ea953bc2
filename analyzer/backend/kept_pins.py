"""The out_shardings a move's fix names for the state it leaves where it is: only the pins that change something.

A single move returns the state it does not move on its input's layout (parameter_moves.returning_state), lest
the move propagate another layout into it and the next step reshard it. Where the move returns that state on its
input's layout anyway, the pin changes nothing, and a fix text asking for it ("and return the 3 other state
outputs each on its input's layout (out_shardings=)") asks the user to write out_shardings for nothing: a blackjax
step's chain state, P('chains') in and out, beside SL203's move of the dataset X. So lint compiles a move with
those pins left out; the ones its compile shows needed (an output returned on another layout than its input's)
are then compiled with the move and named. The text printed is the program whose figures are printed."""

from __future__ import annotations

from collections.abc import Mapping

from ...passes.common.sharding_text import normalized
from ...passes.models.report import TargetReport

Sharding = list[list[str]]


def without_kept_pins(returned: Mapping[int, int], arguments: Mapping[int, Sharding],
                      results: Mapping[int, Sharding]) -> tuple[dict[int, Sharding], dict[int, Sharding]]:
    """(the move's results without the pins of the state it does not move, those pins): ``returned`` is result ->
    the argument it returns, ``arguments`` the move's (an argument it moves keeps its result's pin)."""
    kept = {o: s for o, s in results.items() if returned.get(o) not in arguments}
    return {o: s for o, s in results.items() if o not in kept}, kept


def needed_pins(report: TargetReport, kept: Mapping[int, Sharding]) -> dict[int, Sharding]:
    """The pins of ``kept`` that the move compiled without them (``report``) shows needed: each output it returns
    on another layout than the pin's (its input's)."""
    outputs = {t.index: t for t in report.outputs}
    return {o: s for o, s in kept.items() if o not in outputs or outputs[o].sharding is None
            or normalized(outputs[o].sharding, len(outputs[o].shape)) != normalized(s, len(outputs[o].shape))}
