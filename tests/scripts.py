"""The one loader of the scripts tests import themselves (examples/, fixtures/scripts/), where a test
lowers a script's targets with JAX directly to compare with the tool's report: the file run as a module,
its folder on sys.path while it runs (a fixture's ``from _mesh import ...``, an example's helper
modules) and nothing left on sys.path after."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script_module(path: str, name: str | None = None, search: str | None = None) -> ModuleType:
    """The script at ``path`` (absolute, or relative to the repository root) run as module ``name``
    (by default ``_test_script_`` and the file's stem); ``search`` on sys.path while it runs instead of
    the script's folder."""
    full = path if os.path.isabs(path) else os.path.join(ROOT, path)
    stem = os.path.splitext(os.path.basename(full))[0]
    spec = importlib.util.spec_from_file_location(name or f"_test_script_{stem}", full)
    assert spec is not None and spec.loader is not None, full
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, search or os.path.dirname(full))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def script_targets(path: str, **params: Any) -> dict[str, Any]:
    """The script's ``shard_lint_targets(**params)``: target name -> jax.stages.Lowered."""
    return script_module(path).shard_lint_targets(**params)
