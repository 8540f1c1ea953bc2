"""Whose code is a stack frame: attribution of an op to the user's own line.

JAX records the whole call stack of every op (the compiled HLO's StackFrames
table, the StableHLO ``callsite`` locations). The innermost frame is often a
library's (``flax/nnx/nn/linear.py``, ``optax/_src/transform.py``), where a user
can neither write a suppression nor change anything. A finding's ``source`` is
therefore the innermost frame in the user's code; the innermost library frame
it went through is kept as ``via``. When no frame is the user's, ``source`` is
None and ``via`` still says where the op came from.

Ownership, first match wins:

1. ``third-party`` patterns from the configuration: a library;
2. ``first-party`` patterns: the user's (even when installed in site-packages);
3. a path through ``site-packages`` or ``dist-packages``: a library;
4. a file under one of the user's roots (the script's folder): the user's;
5. the standard library, and the internals of JAX and the model libraries named
   in ``KNOWN_LIBRARIES`` (a source checkout of flax, say): a library;
6. anything else, including ``<stdin>`` and ``<string>``: the user's, save code with no file that a
   library's frame calls (code a library generates and runs): the library's.

A pattern is a dotted module name (``mypkg``, matched as path components) or a
path (``src/``, ``tools/train.py``), matched against the path relative to the
project root and against the absolute path.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models.report import SourceLocation

KNOWN_LIBRARIES = (
    "jax", "jaxlib", "flax", "optax", "equinox", "penzai", "transformers", "haiku", "chex", "orbax",
    "jaxtyping", "treescope", "numpy", "ml_dtypes", "opt_einsum", "jax_shard_lint", "jmp", "distrax",
    "keras", "lineax", "optimistix", "diffrax", "tensorflow", "torch", "_pytest", "pytest", "pluggy",
)
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _components(path: str) -> list[str]:
    return [c for c in path.replace("\\", "/").split("/") if c]


def library_relative(path: str) -> str:
    """A library file as its package path (``flax/nnx/nn/linear.py``): the part
    after the last site-packages/dist-packages folder, else the path itself."""
    parts = _components(path)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _PACKAGE_DIRS:
            return "/".join(parts[i + 1:])
    return path


@dataclass(frozen=True)
class CodeOwnership:
    """Which files are the user's. ``root`` is the project folder patterns are
    relative to; ``user_roots`` are folders whose files are the user's unless
    they lie in an installed package (the script's folder); ``stdlib`` are the
    standard library's folders."""

    first_party: tuple[str, ...] = ()
    third_party: tuple[str, ...] = ()
    root: str | None = None
    user_roots: tuple[str, ...] = ()
    stdlib: tuple[str, ...] = ()
    _cache: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # Attribution per location text: a module repeats the same few hundred stacks.
    locations: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def _matches(self, pattern: str, path: str, parts: list[str]) -> bool:
        pattern = pattern.strip()
        if not pattern:
            return False
        if "/" in pattern or pattern.endswith(".py") or pattern.startswith("."):
            p = posixpath.normpath(pattern.replace("\\", "/"))
            candidates = [path]
            if self.root and path.startswith("/"):
                candidates.append(posixpath.relpath(path, self.root.replace("\\", "/")))
            return any(c == p or c.startswith(p + "/") for c in candidates)
        names = pattern.split(".")
        n = len(names)
        stripped = parts[:-1] + [os.path.splitext(parts[-1])[0]] if parts else []
        return any(stripped[i:i + n] == names for i in range(len(stripped) - n + 1))

    def is_user(self, file: str | None) -> bool:
        if not file:
            return False
        hit = self._cache.get(file)
        if hit is None:
            hit = self._cache[file] = self._decide(file)
        return hit

    def _decide(self, file: str) -> bool:
        if file.startswith("<"):
            return not file.startswith("<frozen")
        path = file.replace("\\", "/")
        if not path.startswith("/") and self.root:
            path = posixpath.normpath(posixpath.join(self.root.replace("\\", "/"), path))
        parts = _components(path)
        if any(self._matches(p, path, parts) for p in self.third_party):
            return False
        if any(self._matches(p, path, parts) for p in self.first_party):
            return True
        if any(c in _PACKAGE_DIRS for c in parts):
            return False
        for root in self.user_roots:
            r = root.replace("\\", "/").rstrip("/")
            if path == r or path.startswith(r + "/"):
                return True
        for lib in self.stdlib:
            r = lib.replace("\\", "/").rstrip("/")
            if r and path.startswith(r + "/"):
                return False
        return not any(c in KNOWN_LIBRARIES for c in parts[:-1])

    def attribute(self, stack: Sequence[SourceLocation]) -> tuple[SourceLocation | None, SourceLocation | None]:
        """(source, via) for a call stack listed innermost frame first."""
        if not stack:
            return None, None
        owned = [self._owns(stack, i) for i in range(len(stack))]
        via = None if owned[0] else stack[0]
        for frame, mine in zip(stack, owned):
            if mine:
                return frame, via
        return None, via

    def _owns(self, stack: Sequence[SourceLocation], i: int) -> bool:
        """Whether the user wrote frame ``i``. Code with no file (``<string>``) is the user's where the user
        runs it (``python -c``, a cell, their own ``exec``), and a library's where a library frame calls it:
        code a library generates and runs (jax-cfd's solvers reached ``<string>:8`` this way, and it was
        shown as the user's line)."""
        frame = stack[i]
        if not self.is_user(frame.file):
            return False
        if not (frame.file or "").startswith("<"):
            return True
        return i + 1 >= len(stack) or self._owns(stack, i + 1)


def default_stdlib() -> tuple[str, ...]:
    """The standard library's folders, without the site-packages inside them."""
    import sysconfig

    paths = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib")}
    return tuple(sorted(p for p in paths if p))


DEFAULT_OWNERSHIP = CodeOwnership(stdlib=default_stdlib())
