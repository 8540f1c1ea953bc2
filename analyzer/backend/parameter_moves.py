"""One definition of "a single move of a parameter", shared by lint's fix checks
(fix_checks.py), suggest's single moves (advice/moves.py) and the solver
fixes (advice/solver_fixes.py), so the same change is compiled as the same program
and measured the same by each.

A move gives a parameter a new sharding, and with it the optimizer state that
mirrors it (the same key path under another argument: ``opt_state[0].mu['w']`` for
``params['w']``, and the same shape), as a person moving a parameter moves its moments,
whatever layout they were written in (moments left replicated beside a sharded parameter
are the same value's state: an Adam step moved without them compiles to another program
than the one a person writes); and the state that comes back (the step's updated
parameter and moments) is returned in the new layout (its out_shardings pinned), so
the next step takes it as it is and does not reshard it. The state the move leaves
where it is, and that the written step returns as it takes it, comes back on its
input's layout (pinned too), as suggest returns every version's state
(``_returning_state``): left to XLA, a move can propagate another layout into it (an
MLP's replicated w2 and its moments back on 'model' once w1 moves), and the pasted fix
would make the next step reshard it on entry. State the written step already returns
on another layout (SL201's, its own finding and fix) is left as written, to XLA: pinned
here it would put SL201's decision into the move's figures (an nnx Adam step's moments,
whose pinning costs more than the move saves). Every other argument and result stays
as the program writes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ...passes.common.sharding_text import normalized

Sharding = list[list[str]]


def matcher(pattern: str) -> re.Pattern[str]:
    """A parameter pattern (``h[*]``) as a regex over argument paths."""
    return re.compile(re.escape(pattern).replace(re.escape("[*]"), r"\[(?:'\d+'|\"\d+\"|\d+)\]") + "$")


# An argument's name and the tuple indices before its first dict key: nnx.split's (model, optimizer) state
# is one argument, ``state[0]['embed']`` and its moments ``state[1]['opt_state'][0]['mu']['embed']``.
_TUPLE_ROOT = re.compile(r"[^\[]*(?:\[\d+\])*(?=\[['\"])")


def key_path(path: str) -> str:
    """The part of an argument's path under its argument (``['w']`` of ``params['w']``, and of
    ``state[0]['w']``: a tuple's index before a dict key is the argument's; a list's index with no key
    after it, penzai's ``params[7].value``, is the parameter's own)."""
    root = _TUPLE_ROOT.match(path)
    if root is not None:
        return path[root.end():]
    return path[path.find("["):] if "[" in path else path


def mirrors(inputs: Sequence, index: int) -> list[int]:
    """The arguments that mirror argument ``index`` (its optimizer state): the same key path under
    another argument and the same shape, whatever their written layout."""
    leader = next(t for t in inputs if t.index == index)
    if "[" not in leader.path:
        return []
    mirror = matcher(key_path(leader.path))
    return [t.index for t in inputs if t.index != index and mirror.search(t.path)
            and tuple(t.shape) == tuple(leader.shape)]


def single_move(inputs: Sequence, returned: Mapping[int, int], edits: Mapping[int, Sharding],
                held: frozenset[int] = frozenset()) -> tuple[dict[int, Sharding], dict[int, Sharding]]:
    """(argument shardings, result shardings) of the move ``edits`` (argument -> its new sharding):
    each edited argument's mirrors moved with it (but ``held`` ones, kept as written), each moved
    argument that comes back as a result (``returned``: result -> argument) returned in its new layout,
    and every other state result returned on its argument's written layout (``returning_state``)."""
    arguments = {i: [list(a) for a in s] for i, s in edits.items()}
    for i, s in edits.items():
        for j in mirrors(inputs, i):
            if j not in held:
                arguments.setdefault(j, [list(a) for a in s])
    return arguments, returning_state(inputs, returned, arguments)


class StateReturns(dict[int, int]):
    """Result -> the argument it returns, for a step's state; ``unsettled``: the results the written step
    returns on another layout than their argument's (SL201's), which a move leaves to XLA unless it moves
    them."""

    def __init__(self, pairs: Mapping[int, int], unsettled: frozenset[int] = frozenset()):
        super().__init__(pairs)
        self.unsettled = unsettled


def state_returns(pairs: Mapping[int, int], inputs: Sequence, outputs: Sequence) -> StateReturns:
    """``pairs`` (result -> argument) with the results the compiled step (``inputs``, ``outputs``: its
    report's) returns on another layout than their argument's marked unsettled."""
    ins, outs = {t.index: t for t in inputs}, {t.index: t for t in outputs}
    unsettled = frozenset(o for o, i in pairs.items() if o in outs and i in ins and normalized(
        outs[o].sharding, len(outs[o].shape)) != normalized(ins[i].sharding, len(ins[i].shape)))
    return StateReturns(pairs, unsettled)


def returning_state(inputs: Sequence, returned: Mapping[int, int],
                    arguments: Mapping[int, Sharding]) -> dict[int, Sharding]:
    """Each state result (``returned``: result -> argument) pinned to its argument's sharding: the one in
    ``arguments`` (a move's), else the argument's as written where the written step returns it so (not an
    unsettled one of a ``StateReturns``), so the next step takes every state value as this one returns it."""
    written = {t.index: t.sharding for t in inputs}
    unsettled = returned.unsettled if isinstance(returned, StateReturns) else frozenset()
    results = {}
    for o, i in sorted(returned.items()):
        if i not in arguments and o in unsettled:
            continue
        s = arguments.get(i, written.get(i))
        if s is not None:
            results[o] = [list(a) for a in s]
    return results


def kept_count(returned: Mapping[int, int], arguments: Mapping[int, Sharding], results: Mapping[int, Sharding]) -> int:
    """How many of ``results`` a move returns on their written layout (state it does not move)."""
    return sum(1 for o, i in returned.items() if i not in arguments and o in results)


def left_to_xla(inputs: Sequence, returned: Mapping[int, int], results: Mapping[int, Sharding]) -> tuple[str, ...]:
    """The state arguments (their paths) whose results a move leaves unpinned (not in ``results``): those the
    written step returns on another layout than it takes them (``StateReturns.unsettled``)."""
    by_index = {t.index: t.path for t in inputs}
    return tuple(by_index[i] for o, i in sorted(returned.items()) if o not in results and i in by_index)


def listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: names as a fix text lists them."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# The optimizer state a fix text names by path (each layer's moments of a [*] pattern would be dozens).
_NAMED = 4


def moved_text(state: Sequence[str], returned: int, kept: int = 0, free: Sequence[str] = ()) -> str:
    """What a move does besides the parameters a fix names, as its text says it (it was compiled that way):
    the optimizer state it moves with them (``state``: their paths), and what it returns (``returns_text``)."""
    text = f", with its optimizer state {listed(_named(state))} on the same layout" if state else ""
    return text + returns_text(returned, kept, free)


def returns_text(returned: int, kept: int, free: Sequence[str] = ()) -> str:
    """The out_shardings a move was compiled with, as its text says them: the ``returned`` results of the moved
    state in the new layout, so the next step does not reshard them, the ``kept`` state results it does not move
    on their inputs' layouts, and the results of ``free`` (their arguments' paths) left to XLA, as the written
    step leaves them (a user who pins every state output compiles another program than the one checked)."""
    text = f", and return {'it' if returned == 1 else 'them'} in that layout" if returned else ""
    if kept:
        text += f" and {kept_text(kept)}" if returned else f", and return {kept_text(kept)}"
    if free:
        one = len(free) == 1
        text += (f", leaving {'the output' if one else f'the {len(free)} outputs'} of {listed(_named(free))} to XLA "
                 f"(None: the step as written returns {'it' if one else 'them'} on another layout than "
                 f"{'its' if one else 'their'} input's)")
    return text + (" (out_shardings=)" if returned or kept or free else "")


def _named(paths: Sequence[str]) -> list[str]:
    return list(paths[:_NAMED]) + ([f"{len(paths) - _NAMED} more"] if len(paths) > _NAMED else [])


def kept_text(kept: int) -> str:
    """The state results a move leaves where they are, as its text says it returns them."""
    return ("the other state output on its input's layout" if kept == 1
            else f"the {kept} other state outputs each on its input's layout")
