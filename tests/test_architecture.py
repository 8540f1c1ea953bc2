"""The layout holds: no import cycle between modules, the supervising parent
imports no JAX, modules stay small. (The import contracts between packages are
import-linter's, in pyproject.toml, run by .ci/run.)"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib

from conftest import ROOT

PACKAGES = ("analyzer", "passes", "reports")
MAX_LINES = 400
# Over the limit when the limit was first tested; this list only shrinks (empty since suggest became a package).
OVER_THE_LIMIT: set[str] = set()


def _modules() -> dict[str, tuple[str, bool]]:
    """Dotted name (under jax_shard_lint) -> (path, is a package)."""
    found = {}
    for top in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    is_package = dotted.endswith(".__init__")
                    found[dotted.removesuffix(".__init__")] = (path, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every import between our modules, the ones inside functions too."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("jax_shard_lint."):
                base = node.module.removeprefix("jax_shard_lint.")
            else:
                continue
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            # `from package import submodule` needs the submodule; the package is being imported anyway.
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_the_supervising_parent_imports_no_jax():
    """The parent starts in a fraction of JAX's import time and cannot be crashed by it."""
    probe = ("import sys, jax_shard_lint.analyzer.cli.main; "
             "print(sorted(m for m in ('jax', 'jaxlib', 'numpy', 'rich', 'pydantic') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_modules_stay_under_400_lines():
    over = set()
    for path, _ in _modules().values():
        with open(path, encoding="utf-8") as f:
            if sum(1 for _ in f) > MAX_LINES:
                over.add(os.path.relpath(path, ROOT))
    assert over <= OVER_THE_LIMIT, f"over {MAX_LINES} lines: {sorted(over - OVER_THE_LIMIT)}"
    assert OVER_THE_LIMIT <= over, f"under the limit now, drop from the list: {sorted(OVER_THE_LIMIT - over)}"


def test_every_package_folder_is_in_the_wheel():
    """setuptools installs the packages pyproject.toml lists, no others: a subpackage missing from the list
    imports in the checkout (an editable install maps the folders) and fails in the wheel (it did once,
    ``analyzer.backend.advice``, caught only by CI's wheel run)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    folders = {"jax_shard_lint." + dotted
               for dotted, (_, is_package) in _modules().items() if is_package}
    assert folders - listed == set(), "missing from [tool.setuptools] packages"
    assert listed - folders == set(), "listed in [tool.setuptools] packages, not a package folder"


def test_every_pass_module_is_in_the_catalogue():
    """docs/passes.md is the one catalogue of passes: a module missing from it is a failure. A rule file
    is named by its path, or by its code in a span (``SL201-206``) of a row that names rule files: a new
    rule file outside every span fails, as does a span naming a rule that has no file."""
    with open(os.path.join(ROOT, "docs", "passes.md"), encoding="utf-8") as f:
        catalogue = f.read()
    rule_file = re.compile(r"sl(\d{3})_\w+\.py$")
    missing, rule_codes = [], {}
    for path, is_package in _modules().values():
        rel = os.path.relpath(path, os.path.join(ROOT, "passes")).replace(os.sep, "/")
        if not path.startswith(os.path.join(ROOT, "passes")) or is_package:
            continue
        if m := rule_file.search(rel):
            rule_codes[int(m.group(1))] = rel
        elif f"`{rel}`" not in catalogue:
            missing.append(rel)
    assert missing == []
    named = {code for code, rel in rule_codes.items() if f"`{rel}`" in catalogue}
    for row in catalogue.splitlines():
        if re.match(r"\| `rules/sl\d{3}_\w+\.py` \.\.\. ", row):
            for first, last in re.findall(r"SL(\d{3})-(\d{3})", row):
                named |= set(range(int(first), int(last) + 1))
    assert sorted(set(rule_codes) - named) == [], "rule files docs/passes.md does not name (add them to a span)"
    assert sorted(named - set(rule_codes)) == [], "codes docs/passes.md names that have no rule file"


def _code_lists(tree: ast.AST) -> list[str]:
    """A rule code written as a string (``"SL206"``) outside a docstring, or a tuple, list or set naming two
    or more rule codes (``(SL201.code, SL203.code)``): what a trait declared in the rule's file replaces."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    code = re.compile(r"SL\d{3}")
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and code.fullmatch(node.value)):
            found.append(f"line {node.lineno}: {node.value!r}")
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            named = [e for e in node.elts if code.fullmatch(ast.unparse(e).removesuffix(".code"))]
            if len(named) >= 2:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_rule_codes_are_listed_only_by_the_rules():
    """Which rules a stage acts on is a trait in each rule's file (``RuleTraits``), read from the table
    (``table.codes_where``): outside the rule files, the table and the code names, a rule is named by its
    constant, one at a time (``f.rule == SL202.code``), never in a list of codes or as a string."""
    allowed = re.compile(r"passes/(rules/(sl\d{3}_\w+|table)|models/rule_codes)\.py$")
    found = {}
    for path, _ in _modules().values():
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if not allowed.search(rel):
            with open(path, encoding="utf-8") as f:
                if lists := _code_lists(ast.parse(f.read())):
                    found[rel] = lists
    assert found == {}


# Comparing a finding's rule with one code outside the rule files: what a trait replaces. This list only shrinks
# (empty since the stated-layout edits and the rewrite's remaining costs read traits: layout_edit,
# about_output_layout).
RULE_COMPARISONS_LEFT: set[str] = set()


def _rule_comparisons(tree: ast.AST) -> list[str]:
    """``f.rule == SL203.code`` (or ``!=``, ``in``, ``not in``): a stage keyed on one rule's code."""
    def is_code(node: ast.expr) -> bool:
        return re.fullmatch(r"SL\d{3}\.code", ast.unparse(node)) is not None

    def is_rule(node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "rule"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_code(s) for s in sides) and any(is_rule(s) for s in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_comparison_finder_finds_one():
    tree = ast.parse("if f.rule == SL203.code or SL202.code != g.rule: pass\nx = r.code == SL201.code\n")
    assert _rule_comparisons(tree) == ["line 1: f.rule == SL203.code", "line 1: SL202.code != g.rule"]


def test_no_stage_compares_a_finding_with_a_rule_code():
    """What a stage does with a rule's findings is a trait in the rule's file, read through the catalogue
    (passes/pipelines/catalogue.py): outside the rule files no stage compares ``f.rule == SL203.code``."""
    rule_file = re.compile(r"passes/rules/sl\d{3}_\w+\.py$")
    found = {}
    for path, _ in _modules().values():
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel.split("/")[0] in ("analyzer", "passes") and not rule_file.search(rel):
            with open(path, encoding="utf-8") as f:
                if comparisons := _rule_comparisons(ast.parse(f.read())):
                    found[rel] = comparisons
    assert set(found) <= RULE_COMPARISONS_LEFT, {k: v for k, v in found.items() if k not in RULE_COMPARISONS_LEFT}
    assert RULE_COMPARISONS_LEFT <= set(found), f"none left, drop from the list: {RULE_COMPARISONS_LEFT - set(found)}"


# A rule file importing another's internals; this list only shrinks.
RULE_IMPORTS_LEFT = {
    # SL102 leaves to SL101 a loop's collective SL101 reports (claims would also leave it SL104's: a change).
    ("passes.rules.sl102_collective_in_loop", "passes.rules.sl101_replicating_collective"),
    # One threshold for both donation rules.
    ("passes.rules.sl205_unusable_donation", "passes.rules.sl202_missing_donation"),
}


def test_a_rule_file_imports_no_other_rule_file():
    """What other rules explain is their declared claims (RuleTraits.claims, RuleContext.claimed_collectives):
    SL105 reads no other rule's internals, and a new rule's claimed collectives are left out with no edit there."""
    rule = re.compile(r"passes\.rules\.sl\d{3}_\w+$")
    found = {(m, t) for m, targets in import_graph().items() if rule.match(m) for t in targets if rule.match(t)}
    assert found <= RULE_IMPORTS_LEFT, found - RULE_IMPORTS_LEFT
    assert RULE_IMPORTS_LEFT <= found, f"gone, drop from the list: {RULE_IMPORTS_LEFT - found}"


def test_no_pipeline_imports_a_rule_file():
    """A pipeline reaches the rules through the table (``RULES``, ``codes_where``) and their traits, never a
    rule file by name: what a rule adds to a stage (its merge of findings, its pass over the compiled program,
    its report note, its process measures, its fix's edit) is declared in its file, so adding a rule needs no
    edit outside its file and the table."""
    rule = re.compile(r"passes\.rules\.sl\d{3}_\w+$")
    found = {(m, t) for m, targets in import_graph().items() if m.startswith("passes.pipelines")
             for t in targets if rule.match(t)}
    assert found == set()
