"""The analysis cache's key: a SHA-256 over every input a target's report depends on.

The parts are named, so that an entry's file says what it was made from (without
the program text). The tool's own source is one of them: a development checkout
keeps its version number while its code changes, and a report from older code is
stale however the version reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any


def cache_key(parts: dict[str, Any]) -> str:
    """The key of a report made from ``parts`` (JSON-serialisable values only)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_refuse)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def file_digest(path: str | None) -> str | None:
    """A file's content digest (a GPU target spec, say); None for no file, a marker for an unreadable one."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return f"unreadable: {e.strerror or e}"


@functools.lru_cache(maxsize=1)
def tool_source_digest() -> str:
    """A digest of the tool's installed Python files and data (targets, device figures)."""
    from ... import analyzer, passes, reports

    digest = hashlib.sha256()
    for package in (analyzer, passes, reports):
        folder = os.path.abspath(list(package.__path__)[0])
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(root, name)
                digest.update(f"{package.__name__}/{os.path.relpath(path, folder)}".encode())
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def _refuse(value: object) -> str:
    raise TypeError(f"a cache key part must be plain JSON, got {type(value).__name__}")
