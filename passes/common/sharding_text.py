"""Python text for shardings: the ``P(...)`` and ``out_shardings=`` a user pastes."""

from __future__ import annotations

import re
from typing import Any

from .pytree_paths import path_keys

_ATTRIBUTE_KEY = re.compile(r"\.\w")


def is_replicated(sharding: list[list[str]] | None) -> bool:
    return sharding is not None and all(not axes for axes in sharding)


def normalized(sharding: list[list[str]] | None, rank: int) -> tuple[tuple[str, ...], ...] | None:
    if sharding is None:
        return None
    dims = [tuple(a) for a in sharding] + [()] * (rank - len(sharding))
    return tuple(dims[:rank])


def pspec_text(sharding: list[list[str]] | None) -> str:
    """``P('data', None, ('x', 'y'))``; trailing unsharded dims are dropped, as JAX prints."""
    if sharding is None:
        return "None"
    dims = list(sharding)
    while dims and not dims[-1]:
        dims.pop()
    parts = []
    for axes in dims:
        if not axes:
            parts.append("None")
        elif len(axes) == 1:
            parts.append(repr(axes[0]))
        else:
            parts.append("(" + ", ".join(repr(a) for a in axes) + ")")
    return f"P({', '.join(parts)})"


def named_sharding_text(sharding: list[list[str]] | None, mesh_var: str = "mesh") -> str:
    return f"NamedSharding({mesh_var}, {pspec_text(sharding)})"


def out_shardings_text(
    paths: list[str], shardings: list[list[list[str]] | None], mesh_var: str = "mesh",
) -> str | None:
    """The ``out_shardings=`` argument for outputs with these pytree paths.

    The result pytree is rebuilt from the paths (``result[0]['w']``): integer keys
    become tuples, string keys dicts, so the text has the structure ``jit`` expects.
    None when a path has an attribute key (optax's ``ScaleByAdamState.mu``, an
    Equinox module's field): it names a container paths cannot spell; only the
    text built from the real pytree (analyzer/out_shardings.py) can.
    """
    if any(_ATTRIBUTE_KEY.search(path) for path in paths):
        return None
    tree: dict[str | int, Any] = {}
    single = None
    for path, sharding in zip(paths, shardings):
        _, keys = path_keys(path)
        leaf = named_sharding_text(sharding, mesh_var)
        if not keys:
            single = leaf
            continue
        node = tree
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = leaf
    if single is not None and not tree:
        return f"out_shardings={single}"

    def render(node: Any) -> str:
        if not isinstance(node, dict):
            return str(node)
        keys = list(node)
        if keys and all(isinstance(k, int) for k in keys):
            items = [render(node[k]) for k in sorted(keys)]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "{" + ", ".join(f"{k!r}: {render(node[k])}" for k in keys) + "}"

    return f"out_shardings={render(tree)}"


def constraint_change_text(line: int | None, new: list[list[str]], old: list[list[str]], axes: list[str]) -> str:
    """The fix of a collective that gathers back what a ``with_sharding_constraint`` shards: that constraint
    with ``axes`` kept off the dimension the op reads along (the rule's text, and the fix check's)."""
    where = f" at line {line}" if line is not None else ""
    return (f"state {pspec_text(new)} in the with_sharding_constraint{where} instead of {pspec_text(old)} "
            f"({', '.join(axes)} off the dimension the op reads along)")
