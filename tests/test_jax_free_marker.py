"""The ``jax_free`` marker says what CI's newest-JAX leg may leave out (.ci/run): a module that carries it imports
no JAX, directly or through a helper of tests/, and runs no command, so the JAX release installed cannot change
what it checks. What it may import: the standard library, numpy, pytest, the passes and the reports (which import
no JAX: import-linter's contracts in pyproject.toml), tests/' helpers that keep to the same, and conftest's path
constants. It reads stored texts and fixtures, every stored release on every JAX (tests/stored_hlo.py)."""

from __future__ import annotations

import ast
import os
import re
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.jax_free

TESTS = os.path.join(ROOT, "tests")
ALLOWED = set(sys.stdlib_module_names) - {"subprocess"} | {"numpy", "pytest", "__future__"}
PURE_PACKAGES = ("jax_shard_lint.passes", "jax_shard_lint.reports")
CONFTEST_CONSTANTS = {"ROOT", "FIXTURES", "EXAMPLES"}
MARKED = re.compile(r"^pytestmark = pytest\.mark\.jax_free$", re.M)
HELPERS = {f[:-3] for f in os.listdir(TESTS) if f.endswith(".py") and not f.startswith("test_")} - {"conftest"}


def _imports(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level + (node.module or ""), {a.name for a in node.names})


def what_reaches_jax(path: str, seen: set[str] | None = None) -> list[str]:
    """Why the module at ``path`` could depend on the JAX release: its imports outside what is allowed, a helper's
    (followed), and a test that runs a command (the ``cli`` fixture)."""
    seen = set() if seen is None else seen
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    reasons = []
    for module, names in _imports(tree):
        top = module.split(".")[0]
        if module == "conftest":
            if names is None or names - CONFTEST_CONSTANTS:
                reasons.append(f"{path}: conftest's {sorted(names or ['module'])}")
        elif top in HELPERS:
            if top not in seen:
                seen.add(top)
                reasons += what_reaches_jax(os.path.join(TESTS, f"{top}.py"), seen)
        elif not (top in ALLOWED or module.startswith(PURE_PACKAGES)):
            reasons.append(f"{path}: imports {module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(a.arg == "cli" for a in node.args.args):
            reasons.append(f"{path}: {node.name} runs a command (cli)")
    return reasons


def _marked_modules() -> list[str]:
    found = []
    for folder, _, files in os.walk(TESTS):
        for f in sorted(files):
            if f.startswith("test_") and f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as source:
                    if MARKED.search(source.read()):
                        found.append(path)
    return found


def test_every_jax_free_module_reaches_no_jax():
    marked = _marked_modules()
    assert len(marked) >= 10, marked  # the stored-text tests of the passes
    assert [r for path in marked for r in what_reaches_jax(path)] == []


def test_every_module_that_reaches_no_jax_is_marked():
    """The other way round: a module the check finds JAX-free carries the marker, so CI's newest-JAX leg spends no
    time on what that JAX cannot change (issue 49)."""
    marked = set(_marked_modules())
    unmarked = [os.path.relpath(os.path.join(folder, f), ROOT) for folder, _, files in os.walk(TESTS)
                for f in sorted(files) if f.startswith("test_") and f.endswith(".py")
                and os.path.join(folder, f) not in marked and not what_reaches_jax(os.path.join(folder, f))]
    assert unmarked == [], unmarked


def test_the_check_sees_jax_through_a_helper_and_a_command(tmp_path):
    """The check itself: a helper that imports the analyzer, and a test that runs a command, are found."""
    oracle_reader = tmp_path / "test_compiles.py"
    oracle_reader.write_text("from shared_compiles import direct_compiles\n\n\ndef test_x(cli):\n    pass\n")
    reasons = what_reaches_jax(str(oracle_reader))
    assert any("imports jax" in r for r in reasons), reasons
    assert any("runs a command" in r for r in reasons), reasons
    stored_reader = tmp_path / "test_reads_stored.py"
    stored_reader.write_text("import re\n\nfrom stored_hlo import compiled_text\n"
                             "from jax_shard_lint.passes.hlo.parser import parse_hlo_module\n")
    assert what_reaches_jax(str(stored_reader)) == []
