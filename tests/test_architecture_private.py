"""No module imports another module's private names: a helper two modules share has a public owner
(``hlo/fused_matmuls.py`` for the matmuls in a fusion and the op a sum adds; ``fix_verdicts.py`` for a fix's
verdict and the words that print it), so a change to it is a change to a module's interface, seen as one, not
an edit to another module's internals. Checked in passes/, analyzer/ and reports/."""

from __future__ import annotations

import ast

import pytest
from test_architecture import _modules
from test_architecture_reexports import import_base


def private_imports(sources: dict[str, tuple[str, bool]], top: str) -> dict[str, list[str]]:
    """Module (under ``top``) -> ``from module import _name`` it holds that reads one of our modules
    (function-level imports too); a dunder name is no private one."""
    found: dict[str, list[str]] = {}
    for name, (path, is_package) in sources.items():
        if name.split(".")[0] != top:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or (base := import_base(name, is_package, node)) is None:
                continue
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private:
                found.setdefault(name, []).append(f"line {node.lineno}: from {base} import {', '.join(private)}")
    return found


@pytest.mark.parametrize("top", ["passes", "analyzer", "reports"])
def test_no_module_imports_another_modules_private_name(top):
    """In each layer, a name two modules share has one owner with a public name (the fix verdict rule,
    ``fix_verdicts.fix_verdict``, read by lint's fix checks and suggest's choice alike)."""
    assert private_imports(_modules(), top) == {}


def test_the_finder_finds_a_private_import(tmp_path):
    files = {"passes.a": "def _f(): ...\ndef g(): ...\n",
             "passes.b": "from .a import _f, g\nfrom .a import g as _h\n",
             "passes.c": "def k():\n    from jax_shard_lint.passes.a import _f\n",
             "passes.d": "from typing import _Final\nfrom . import __version__\n",
             "other.e": "from ..passes.a import _f\n"}
    sources = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        sources[name] = (str(path), False)
    assert private_imports(sources, "passes") == {"passes.b": ["line 1: from passes.a import _f"],
                                                  "passes.c": ["line 2: from passes.a import _f"]}

