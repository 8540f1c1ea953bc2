"""What reads each all-gather's result: the instructions that take the gathered array as an operand, through the
copies XLA adds on the way (a layout change, an async gather's done).

A small argument gathered whole can be read into values many times its size (ott's Sinkhorn reads a gathered
8 MiB point cloud into 512 MiB cost matrices, several of them live at once): which of those are live at the
peak is the peak the gather is behind (SL208)."""

from __future__ import annotations

from ..models.report import Collective
from .copied_values import is_copy
from .module import HloModule

# Ops that hand the gathered array on unchanged (an async gather's done, a layout copy, a bitcast).
_PASSES_ON = frozenset({"all-gather-done", "bitcast", "copy-start", "copy-done"})
# Copies of copies are followed this far (XLA chains a few at most).
_MAX_HOPS = 8


def gather_readers(hlo: HloModule, collectives: tuple[Collective, ...]) -> dict[str, frozenset[str]]:
    """Each all-gather's HLO name -> the names of the instructions that read its result (the first that do
    more than pass it on)."""
    users = hlo.users()
    out: dict[str, frozenset[str]] = {}
    for c in collectives:
        if c.kind != "all-gather" or hlo.instruction(c.hlo_name) is None:
            continue
        readers: set[str] = set()
        frontier = [c.hlo_name]
        for _ in range(_MAX_HOPS):
            following = []
            for name in frontier:
                for user in users.get(name, []):
                    if user.opcode in _PASSES_ON or is_copy(hlo, user):
                        following.append(user.name)
                    else:
                        readers.add(user.name)
            if not following:
                break
            frontier = following
        out[c.hlo_name] = frozenset(readers)
    return out
