"""Source paths as reports show them: relative to the working directory beneath it, an
installed library's file as its package path, so reports read the same on every machine.
"""

from __future__ import annotations

import os
import typing

from pydantic import BaseModel

from ...passes.models.report import SourceLocation
from ...passes.pipelines.inputs import library_relative


def same_file(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def display_path(path: str, base: str) -> str:
    """Relative to ``base`` beneath it; an installed library's file as its package
    path (``flax/nnx/nn/linear.py``), so reports read the same on every machine."""
    if path.startswith("<"):
        return path
    packaged = library_relative(path)
    if packaged != path:
        return packaged
    absolute = _unmirrored(os.path.abspath(path))
    rel = os.path.relpath(absolute, _unmirrored(os.path.abspath(base)))
    return rel if not rel.startswith("..") else absolute


# On a remote worker (analyzer/executors) the asking machine's files lie under a folder of their own,
# at their paths there: a path is shown as that machine would show it, whether it is a copied file's
# (under the folder) or one the program's locations name (that machine's own path).
MIRROR_ROOT_ENV = "JAX_SHARD_LINT_MIRROR_ROOT"


def _unmirrored(path: str) -> str:
    root = os.environ.get(MIRROR_ROOT_ENV)
    return path[len(root):] if root and path.startswith(root + os.sep) else path


def display_source(src: SourceLocation, base: str | None = None) -> str:
    return f"{display_path(src.file, base or os.getcwd())}:{src.line}"


def _located_fields(cls: type) -> tuple[str, ...]:
    """The fields of a report model that can hold a SourceLocation, at any depth."""
    hit = _LOCATED.get(cls)
    if hit is None:
        _LOCATED[cls] = ()  # recursion guard
        names = []
        for name, info in cls.model_fields.items():
            todo, found = [info.annotation], False
            while todo and not found:
                t = todo.pop()
                if t is SourceLocation:
                    found = True
                elif isinstance(t, type) and issubclass(t, BaseModel):
                    found = bool(_located_fields(t))
                else:
                    todo.extend(typing.get_args(t))
            if found:
                names.append(name)
        hit = _LOCATED[cls] = tuple(names)
    return hit


_LOCATED: dict[type, tuple[str, ...]] = {}


def relativize(report, base: str):
    """Source paths relative to ``base`` where they lie beneath it, so reports
    read the same on every machine. Only fields that can hold a location are
    walked, and each path is worked out once."""
    paths: dict[str, str] = {}

    def fix(obj):
        if isinstance(obj, SourceLocation):
            shown = paths.get(obj.file)
            if shown is None:
                shown = paths[obj.file] = display_path(obj.file, base)
            return obj if shown == obj.file else obj.model_copy(update={"file": shown})
        if isinstance(obj, list):
            return [fix(x) for x in obj]
        if isinstance(obj, BaseModel):
            fields = _located_fields(type(obj))
            if not fields:
                return obj
            updates = {k: fix(getattr(obj, k)) for k in fields}
            return obj.model_copy(update=updates)
        return obj

    return fix(report)
