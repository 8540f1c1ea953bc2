"""A name is imported from the module that defines it, not from one that imports it to hand it on; the
re-exports left are the analyzer's window onto passes/ (import-linter lets the analyzer import passes/
through the pipelines and the models only), each listed here with why. The list only shrinks."""

from __future__ import annotations

import ast
import os

from conftest import ROOT
from test_architecture import _modules

# Module -> the names it hands on that another module (or a test) imports from it, and why.
REEXPORTS = {
    # The rule table as the analyzer reads it (`rules`, `rule`, the configuration's and arguments' rule
    # codes and options): passes/rules/ owns them, out of the analyzer's reach.
    "passes.pipelines.catalogue": {"RULES", "OptionKind", "all_options", "find_rule", "rule_docs"},
    # PassConfig's `ownership` field's type and default, and whose code a path is (source/frames.py).
    "passes.pipelines.inputs": {"CodeOwnership", "DEFAULT_OWNERSHIP", "library_relative"},
    # The StableHLO the analyzer edits (backend/sharding_edits.py) and checks has an entry (inputs/checked_in.py).
    "passes.pipelines.stablehlo_edits": {"clone", "constraint_ops", "entry_function", "missing_entry"},
    # XLA's own reports the analyzer reads where it gets them (the partitioner's warnings, a dump's memory).
    "passes.pipelines.xla_reports": {"is_partitioner_warning", "stats_from_buffer_assignment"},
    # The types a pipeline takes or returns, defined where the passes that make them are.
    "passes.pipelines.lint": {"ConflictCheck"},
    "passes.pipelines.propagate": {"Propagated"},
    "passes.pipelines.plan_check": {"LayoutCheck"},
    "passes.pipelines.suggest": {"Assignment", "ShardingGraph", "ShardingProblem", "Solution",
                                 "restrict_groups"},
}


def import_base(module: str | None, is_package: bool, node: ast.ImportFrom) -> str | None:
    """The dotted module (under jax_shard_lint) an import reads from; None outside the package."""
    if node.level and module is not None:
        parts = (module if is_package else module.rpartition(".")[0]).split(".")
        return ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    if node.module and node.module.startswith("jax_shard_lint."):
        return node.module.removeprefix("jax_shard_lint.")
    return None


def reexports(sources: dict[str, tuple[str, bool]], importers: list[str]) -> dict[str, set[str]]:
    """Module -> the names it imports at its top level from one of our modules that another module (of
    ``sources``, or a file of ``importers``) imports from it."""
    trees = {}
    for name, (path, _) in sources.items():
        with open(path, encoding="utf-8") as f:
            trees[name] = ast.parse(f.read())
    imported: dict[str, set[str]] = {}
    for name, tree in trees.items():
        imported[name] = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                          and import_base(name, sources[name][1], node) is not None for a in node.names}
    reads = [(name, sources[name][1], tree) for name, tree in trees.items()]
    for path in importers:
        with open(path, encoding="utf-8") as f:
            reads.append((None, False, ast.parse(f.read())))
    found: dict[str, set[str]] = {}
    for name, is_package, tree in reads:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or (base := import_base(name, is_package, node)) is None:
                continue
            for a in node.names:
                if f"{base}.{a.name}" not in sources and a.name in imported.get(base, ()):
                    found.setdefault(base, set()).add(a.name)
    return found


def _test_files() -> list[str]:
    return [os.path.join(folder, f) for folder, _, files in os.walk(os.path.join(ROOT, "tests"))
            for f in files if f.endswith(".py")]


def test_only_the_listed_names_are_re_exported():
    assert reexports(_modules(), _test_files()) == REEXPORTS


def test_the_finder_finds_a_name_handed_on(tmp_path):
    files = {"pkg.a": "def f(): ...\n", "pkg.b": "from .a import f\nfrom .a import f as g\n",
             "pkg.c": "from .b import f\nfrom .a import f as h\n", "pkg.d": "from .b import g\n"}
    sources = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        sources[name] = (str(path), False)
    test = tmp_path / "test_x.py"
    test.write_text("from jax_shard_lint.pkg.c import h\n")
    assert reexports(sources, [str(test)]) == {"pkg.b": {"f", "g"}, "pkg.c": {"h"}}
