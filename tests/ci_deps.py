"""Skips for a missing dependency, which fail instead where CI runs (``CI=true``, set by CI and by .ci/run).

CI installs the extras ``[test,gpu,tpu,ray]`` and Debian's Chromium: a test that skips there because one of
them is missing hides a broken install (the HTML tests skipped when Chromium failed to install, the Ray
tests when the cluster failed to start, the flax tests when flax was gone). Outside CI, a developer without
an extra still gets a skip that says what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def has_module(name: str) -> bool:
    """Whether ``name`` imports, without importing it; a dotted name whose parent package is missing
    (``jax_plugins.xla_cuda12`` without ``jax_plugins``) is missing, not a collection error."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing(reason: str, allow_module_level: bool = False) -> None:
    """Skip with ``reason``; under CI, fail with it (CI installed what is missing)."""
    if in_ci():
        pytest.fail(f"CI installs this, yet: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def require(name: str, reason: str, allow_module_level: bool = False):
    """``pytest.importorskip`` that fails under CI: the module, imported."""
    if not has_module(name):
        missing(reason, allow_module_level)
    return importlib.import_module(name)


def needs(name: str, reason: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark for a missing module; under CI no skip, so the test runs and fails on the import."""
    return pytest.mark.skipif(not has_module(name) and not in_ci(), reason=reason)
