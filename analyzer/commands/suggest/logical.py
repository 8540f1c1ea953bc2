"""``suggest`` for code that shards through logical axis names (Flax's
``nn.with_logical_partitioning`` and ``logical_axis_rules``, as MaxText and T5X
write it): which rule to change, not which ``in_shardings`` to paste.

The names are visible only where the script says them: ``shard_lint_logical_axes(**params)``
returns ``{"rules": RULES, "arguments": {argument name: pytree of PartitionSpecs of
logical names}}`` (``nn.get_partition_spec`` of the abstract variables gives one).

Each logical name is mapped to the mesh axes the suggestion puts on the
dimensions it names, weighted by their bytes (a name wanted two ways takes the
heavier; the lighter parameters are listed as exceptions). The new rules are
checked before they are shown: Flax's own ``logical_to_mesh_axes`` resolves every
argument under them, and the report counts the arguments that then get their
suggested sharding.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ....passes.common.sharding_text import normalized, pspec_text
from ....passes.models.suggest import ChosenSharding, LogicalRuleAdvice, LogicalRuleChange
from ...errors import ShardLintInputError
from ..rewrite.command import call_entry

LOGICAL_ENTRY = "shard_lint_logical_axes"

Names = tuple[Any, ...]  # per dimension: a logical name, a tuple of them, or None


def declared_logical(fn: Any, params: dict, where: str) -> tuple[list[tuple[str, Any]], dict[str, Names]] | None:
    """(rules, argument path -> logical names per dimension) from the script's hook, or None."""
    import jax
    from jax.sharding import PartitionSpec

    defined, result = call_entry(fn, LOGICAL_ENTRY, params, where)
    if not defined:
        return None
    if not isinstance(result, dict) or "rules" not in result or not isinstance(result.get("arguments"), dict):
        raise ShardLintInputError(where, f"{LOGICAL_ENTRY}() returned {type(result).__name__}; expected "
                                  "{'rules': [(logical name, mesh axes), ...], 'arguments': {argument name: "
                                  "PartitionSpecs of logical names}}")
    rules = [(str(name), axes) for name, axes in result["rules"]]
    names: dict[str, Names] = {}
    for arg, tree in result["arguments"].items():
        leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, PartitionSpec))[0]
        for path, spec in leaves:
            if isinstance(spec, PartitionSpec):
                names[str(arg) + jax.tree_util.keystr(path)] = tuple(spec)
    return rules, names


def _axes(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _rule_value(axes: tuple[str, ...]) -> Any:
    return None if not axes else axes[0] if len(axes) == 1 else axes


def _resolve(spec: Names, rules: list[tuple[str, Any]]) -> list[list[str]]:
    """Mesh axes per dimension under ``rules``: Flax's own resolution where Flax is
    installed (the oracle), else its documented one (the first rule for the name whose
    mesh axes no earlier dimension took)."""
    try:
        import flax.linen as nn

        resolved = tuple(nn.logical_to_mesh_axes(list(spec), rules) or ())
        return [list(_axes(d)) for d in resolved] + [[] for _ in range(len(spec) - len(resolved))]
    except ImportError:
        pass
    used: set[str] = set()
    out = []
    for name in spec:
        got: tuple[str, ...] = ()
        for logical in (name if isinstance(name, tuple) else (name,)):
            for rule_name, axes in rules:
                if rule_name == logical and not used & set(_axes(axes)):
                    got += _axes(axes)
                    used |= set(_axes(axes))
                    break
        out.append(list(got))
    return out


def rule_advice(arguments: list[ChosenSharding], rules: list[tuple[str, Any]],
                names: dict[str, Names]) -> LogicalRuleAdvice | None:
    wanted: dict[str, dict[tuple[str, ...], int]] = defaultdict(lambda: defaultdict(int))
    covered = [a for a in arguments if a.path in names]
    if not covered:
        return None
    for a in covered:
        for name, axes in zip(names[a.path], a.suggested):
            if isinstance(name, str):
                wanted[name][tuple(axes)] += a.suggested_per_device_bytes or 1
    current = {name: _axes(axes) for name, axes in reversed(rules)}  # the first rule for a name wins
    chosen = {name: max(sorted(ways.items()), key=lambda kv: kv[1])[0] for name, ways in wanted.items()}
    changes = [LogicalRuleChange(logical=name, written=list(current[name]) if name in current else None,
                                 suggested=list(axes), dimensions=sum(1 for a in covered for n in names[a.path]
                                                                      if n == name))
               for name, axes in sorted(chosen.items()) if current.get(name) != axes]
    new_rules = [(name, _rule_value(chosen[name]) if name in chosen else axes) for name, axes in rules]
    new_rules += [(name, _rule_value(axes)) for name, axes in sorted(chosen.items()) if name not in current]
    exceptions, reached = [], 0
    for a in covered:
        got = _resolve(names[a.path], new_rules)
        if normalized(got, len(a.shape)) == normalized(a.suggested, len(a.shape)):
            reached += 1
        else:
            exceptions.append(f"{a.path}: the rules give {pspec_text(got)}, the suggestion is "
                              f"{pspec_text(a.suggested)}")
    return LogicalRuleAdvice(rules_text="rules = " + repr(tuple(new_rules)), changes=changes, reached=reached,
                             covered=len(covered), exceptions=exceptions)
