"""The run's target is resolved by the front end only (analyzer/backend/run_target.py), at one place per
command start; and passes/ imports no jax, and of jaxlib only its MLIR bindings."""

from __future__ import annotations

import ast
import os
from collections import Counter

from conftest import ROOT
from test_architecture import _modules

# What resolves a target (a GPU spec read, a TPU slice chosen, a label made, a program's target): called
# by the front end only, and by the module that defines them.
RESOLVERS = {"resolve_spec", "program_target", "with_devices", "target_label", "resolve_target", "load_target"}
FRONT_END = "analyzer.backend.run_target"
# Where each is called besides the front end, and why.
RESOLVERS_ELSEWHERE = {
    ("analyzer.platforms.resolved_target", "load_target"),  # resolve_spec and program_target read the spec
    ("analyzer.platforms.resolved_target", "resolve_target"),  # resolve_spec chooses the TPU slice
    ("analyzer.platforms.resolved_target", "target_label"),  # with_devices labels the target it makes
    # The --device preset table reads each bundled GPU spec's memory at import: no run's target.
    ("analyzer.platforms.presets", "load_target"),
}
# The front end's one function, called once at each command's start.
COMMAND_STARTS = {
    "analyzer.backend.script_targets": "load_script: lint, fit, suggest, snapshot, a script's propagate and rewrite",
    "analyzer.commands.gate": "check (and gate's check)",
    "analyzer.commands.propagate": "propagate of a .mlir",
    "analyzer.commands.rewrite.command": "rewrite of a .mlir",
    "analyzer.commands.sweep": "sweep",
    "analyzer.commands.run.command": "run (as_run: the programs a script compiled)",
    "analyzer.testing": "a library caller's lowered programs",
}


def _calls(tree: ast.AST, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                found.append(name)
    return found


def _trees() -> dict[str, ast.AST]:
    out = {}
    for name, (path, _) in _modules().items():
        with open(path, encoding="utf-8") as f:
            out[name] = ast.parse(f.read())
    return out


def test_nothing_outside_the_front_end_resolves_the_target():
    stray = sorted((module, call) for module, tree in _trees().items() if module != FRONT_END
                   for call in _calls(tree, RESOLVERS) if (module, call) not in RESOLVERS_ELSEWHERE)
    assert stray == [], f"resolved outside {FRONT_END}: {stray}"


def test_the_front_end_is_called_once_at_each_command_start():
    sites = Counter({module: len(_calls(tree, {"resolve_run_target"})) for module, tree in _trees().items()})
    called = {module: n for module, n in sites.items() if n and module != FRONT_END}
    assert called == dict.fromkeys(COMMAND_STARTS, 1)


def test_the_call_finder_finds_one():
    assert _calls(ast.parse("x = a.load_target('h100')\nresolve_spec()"), RESOLVERS) == ["load_target",
                                                                                          "resolve_spec"]


def _jax_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [n for n in names if n.split(".")[0] in ("jax", "jaxlib")]
    return found


def test_passes_import_of_jaxlib_only_its_mlir_bindings():
    """What docs/passes.md says: no jax (import-linter's first contract too), and of jaxlib nothing but
    jaxlib.mlir (import-linter sees an outside package whole, so this is checked here)."""
    imports = {module: _jax_imports(tree) for module, tree in _trees().items() if module.startswith("passes.")}
    wrong = sorted((m, n) for m, names in imports.items() for n in names
                   if n != "jaxlib.mlir" and not n.startswith("jaxlib.mlir."))
    assert wrong == []
    users = sorted(m for m, names in imports.items() if names)
    with open(os.path.join(ROOT, "docs", "passes.md"), encoding="utf-8") as f:
        assert f"{len(users)} modules" in f.read().split("\n## ")[0]


def test_the_import_finder_finds_jax_and_jaxlib():
    tree = ast.parse("import jax.numpy\nfrom jaxlib import xla_client\nfrom jaxlib.mlir import ir\nfrom . import jax")
    assert _jax_imports(tree) == ["jax.numpy", "jaxlib", "jaxlib.mlir"]
