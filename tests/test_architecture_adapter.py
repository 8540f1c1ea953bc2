"""JAX's private APIs are used in analyzer/adapter/ alone (docs/architecture.md): no module outside it imports
``jax._src``, ``jax_plugins`` or anything of jaxlib but its MLIR bindings, or reads ``jax._src`` as an
attribute. import-linter sees an outside package whole, so its contract in pyproject.toml checks the other
half (outside the adapter, its JAX-using modules only through jax_adapter.py) and this checks these names."""

from __future__ import annotations

import ast

from test_architecture import _modules

PRIVATE = ("jax._src", "jax_plugins", "jaxlib")
ALLOWED = ("jaxlib.mlir",)


def _is_private(name: str) -> bool:
    def under(prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return any(under(p) for p in PRIVATE) and not any(under(a) for a in ALLOWED)


def private_uses(tree: ast.AST) -> list[str]:
    """``import``/``from`` of a private JAX module, and ``jax._src...`` read as an attribute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if _is_private(node.module):
                found.append(f"line {node.lineno}: from {node.module}")
            elif node.module in ("jax", "jaxlib") and any(a.name.startswith("_") for a in node.names):
                found.append(f"line {node.lineno}: from {node.module} import _...")
        elif (isinstance(node, ast.Attribute) and node.attr == "_src" and isinstance(node.value, ast.Name)
              and node.value.id == "jax"):
            found.append(f"line {node.lineno}: jax._src")
    return found


def test_the_finder_finds_private_jax():
    tree = ast.parse("import jax\nimport jax._src.lib\nfrom jax._src import core\nfrom jax import _src\n"
                     "from jaxlib import xla_client\nfrom jaxlib.mlir import ir\nimport jax_plugins.xla_cuda\n"
                     "x = jax._src.config\nfrom jax.sharding import Mesh\nfrom .jaxlib import y\n")
    assert private_uses(tree) == ["line 2: import jax._src.lib", "line 3: from jax._src",
                                  "line 4: from jax import _...", "line 5: from jaxlib",
                                  "line 7: import jax_plugins.xla_cuda", "line 8: jax._src"]


def test_jax_private_apis_only_in_the_adapter():
    found = {}
    for name, (path, _) in _modules().items():
        if name == "analyzer.adapter" or name.startswith("analyzer.adapter."):
            continue
        with open(path, encoding="utf-8") as f:
            if uses := private_uses(ast.parse(f.read())):
                found[name] = uses
    assert found == {}


def test_the_adapter_is_where_they_are():
    """The check reads the modules that do use them: the adapter's."""
    users = set()
    for name, (path, _) in _modules().items():
        with open(path, encoding="utf-8") as f:
            if private_uses(ast.parse(f.read())):
                users.add(name)
    assert users and all(u.startswith("analyzer.adapter.") for u in users)
    assert {"analyzer.adapter.compiling", "analyzer.adapter.lowered", "analyzer.adapter.devices"} <= users
