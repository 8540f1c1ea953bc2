"""One definition of "a single move of a parameter", shared by lint's fix checks
(fix_checks.py), suggest's single moves (commands/suggest/moves.py) and the solver
fixes (commands/solver_fixes.py), so the same change is compiled as the same program
and measured the same by each.

A move gives a parameter a new sharding, and with it the optimizer state that
mirrors it (the same key path under another argument: ``opt_state[0].mu['w']`` for
``params['w']``, the same shape and the same written layout), as a person moving a
parameter moves its moments; and the state that comes back (the step's updated
parameter and moments) is returned in the new layout (its out_shardings pinned), so
the next step takes it as it is and does not reshard it. Every other argument and
result stays as the program writes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ...passes.common.sharding_text import normalized

Sharding = list[list[str]]


def matcher(pattern: str) -> re.Pattern[str]:
    """A parameter pattern (``h[*]``) as a regex over argument paths."""
    return re.compile(re.escape(pattern).replace(re.escape("[*]"), r"\[(?:'\d+'|\"\d+\"|\d+)\]") + "$")


def key_path(path: str) -> str:
    """The part of an argument's path under its argument (``['w']`` of ``params['w']``)."""
    return path[path.find("["):] if "[" in path else path


def _layout(sharding: Sequence[Sequence[str]] | None, rank: int) -> str:
    return repr(normalized([list(a) for a in sharding or []], rank))


def mirrors(inputs: Sequence, index: int, written: Mapping[int, Sharding | None] | None = None) -> list[int]:
    """The arguments that mirror argument ``index`` (its optimizer state): the same key path under
    another argument, the same shape and the same written layout. ``written``: each argument's
    sharding (its ``sharding`` where not given)."""
    def layout(t) -> str:
        return _layout(written.get(t.index) if written is not None else t.sharding, len(t.shape))

    leader = next(t for t in inputs if t.index == index)
    if "[" not in leader.path:
        return []
    mirror = matcher(key_path(leader.path))
    return [t.index for t in inputs if t.index != index and mirror.search(t.path)
            and tuple(t.shape) == tuple(leader.shape) and layout(t) == layout(leader)]


def single_move(inputs: Sequence, returned: Mapping[int, int], edits: Mapping[int, Sharding],
                written: Mapping[int, Sharding | None] | None = None, held: frozenset[int] = frozenset(),
                ) -> tuple[dict[int, Sharding], dict[int, Sharding]]:
    """(argument shardings, result shardings) of the move ``edits`` (argument -> its new sharding):
    each edited argument's mirrors moved with it (but ``held`` ones, kept as written), and each moved
    argument that comes back as a result (``returned``: result -> argument) returned in its new layout."""
    arguments = {i: [list(a) for a in s] for i, s in edits.items()}
    for i, s in edits.items():
        for j in mirrors(inputs, i, written):
            if j not in held:
                arguments.setdefault(j, [list(a) for a in s])
    results = {o: arguments[i] for o, i in sorted(returned.items()) if i in arguments}
    return arguments, results
