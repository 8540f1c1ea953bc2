"""Every (command, format) renderer in reports/registry.py has a content test: the tests/reports/test_*_reports.py
files each say which pairs they render and read back (COVERS)."""

from __future__ import annotations

import glob
import importlib.util
import os

from jax_shard_lint.reports.registry import RENDERERS


def test_every_renderer_has_a_content_test():
    covered: set[tuple[str, str]] = set()
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "test_*_reports.py"))):
        spec = importlib.util.spec_from_file_location(f"_covers_{os.path.basename(path)[:-3]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        covered |= module.COVERS
    pairs = {(command, fmt) for command, formats in RENDERERS.items() for fmt in formats}
    assert pairs - covered == set(), "renderers without a content test"
    assert covered - pairs == set(), "tests of renderers the registry does not have"
