"""One bounded breadth-first walk, for the passes that walk a module's values back (or forth) from one value.

Each walk visits a value once, nearest first, and stops after ``limit`` values: on a large program a walk
that finds nothing near must not cost the whole program once per value it starts from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)


def breadth_first(starts: Iterable[Node], expand: Callable[[Node], Iterable[Node]], limit: int) -> Iterator[Node]:
    """Each value reached from ``starts`` through ``expand``, once, nearest first, at most ``limit`` of them.

    ``expand`` is called on a value after the caller has seen it (when the walk resumes), so a caller that
    returns early never expands the value it stopped at."""
    seen: set[Node] = set()
    queue: deque[Node] = deque(starts)
    while queue and len(seen) < limit:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        yield node
        queue.extend(expand(node))
