"""The arguments a user keeps as they are, or pins, when ``suggest`` chooses the rest: ``--fix PATH[=SPEC]``
and the script's ``shard_lint_fixed()``."""

from __future__ import annotations

from ...errors import ShardLintInputError
from ..rewrite.command import call_entry, parse_spec

FIXED_ENTRY = "shard_lint_fixed"


def _matches(path: str, key: str) -> bool:
    return path == key or path.startswith((key + "[", key + "."))


def fixed_shardings(fixes: tuple[str, ...], declared: dict, sig, where: str) -> dict[str, tuple[list[list[str]], str]]:
    """Input path -> (sharding, why), from --fix and shard_lint_fixed()."""
    mesh = dict(sig.mesh.axes)
    wanted: list[tuple[str, str | None, str]] = []
    for item in fixes:
        key, sep, text = item.partition("=")
        wanted.append((key.strip(), text if sep else None, f"--fix {item}"))
    for name, stated in declared.items():
        wanted.append((str(name), None if stated is None else str(stated), f"{FIXED_ENTRY}()"))
    out: dict[str, tuple[list[list[str]], str]] = {}
    for key, spec, why in wanted:
        hits = [t for t in sig.inputs if _matches(t.path, key)]
        if not hits:
            raise ShardLintInputError(where if why.startswith(FIXED_ENTRY) else "--fix",
                                      f"no argument {key!r} (arguments: {', '.join(t.path for t in sig.inputs)})")
        for t in hits:
            if spec is None:
                sharding = t.sharding or [[] for _ in t.shape]
            else:
                sharding = parse_spec(spec, mesh, len(t.shape), "--fix" if why.startswith("--fix") else where)
                for n, axes in zip(t.shape, sharding):
                    size = 1
                    for a in axes:
                        size *= mesh[a]
                    if n % size:
                        raise ShardLintInputError("--fix", f"{t.path}: {spec} does not divide its shape {t.shape}")
            out[t.path] = (sharding, why)
    return out


def declared_fixed(fn, params: dict, name: str, where: str) -> dict:
    defined, result = call_entry(fn, FIXED_ENTRY, params, where)
    if not defined or result is None:
        return {}
    if isinstance(result, (list, tuple)):
        return dict.fromkeys(result)
    if isinstance(result, dict) and all(isinstance(v, dict) for v in result.values()) and result:
        return dict(result.get(name, {}))
    if isinstance(result, dict):
        return dict(result)
    raise ShardLintInputError(where, f"{FIXED_ENTRY}() returned {type(result).__name__}; expected a list of "
                              "argument paths or a dict of argument path to PartitionSpec (None: as written)")
