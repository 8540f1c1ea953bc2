"""The whole program the source rules read: the script and the first-party modules it reaches,
their imports resolved to one another, a call graph, and three facts that flow along it.

Every name a scope binds (a module, a function, a lambda) is a node; assignments, call arguments
(to the callee's parameters), returns (to the call's result) and ``jax.tree.map`` (a tree's leaves
to the mapped function's parameters) are edges. A node may hold

- ``SHARDED``: a jitted call's result (sharded however its out_shardings say);
- ``GLOBAL``: an array that is already a global ``jax.Array`` (a jitted result, ``device_put``,
  ``jax.make_array_from_callback`` and its kin), whose ``device_put`` checks nothing across hosts;
- ``REPLICATED``: a sharding built from ``P()``, or a tree of shardings any of which is;
- ``JITTED``: a jitted function passed on as a value (a parameter ``step_fn``), whose calls are
  ``SHARDED`` as the function's own are.

Each fact is found once by a breadth-first walk over the edges from where it starts, so the work is
linear in the program's size. ``SHARDED`` and ``GLOBAL`` follow a value as it is (a name, an element,
an attribute, a leaf); ``REPLICATED`` also follows whatever an expression is built from (a dict of
shardings, ``jax.tree.map(lambda s: NamedSharding(mesh, s), specs)``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..common.python_calls import dotted, is_jit

SHARDED, GLOBAL, REPLICATED, JITTED = "sharded", "global", "replicated", "jitted"
Node = tuple[int, str]  # (scope id, name); a function's result is its "<return>"
RESULT = "<return>"
_SPECS = ("P", "PartitionSpec", "jax.sharding.PartitionSpec", "sharding.PartitionSpec")
_GLOBAL_MAKERS = ("make_array_from_callback", "make_array_from_single_device_arrays",
                  "make_array_from_process_local_data", "device_put", "host_local_array_to_global_array")
TREE_MAPS = ("jax.tree.map", "jax.tree_util.tree_map", "tree_map", "jax.tree_map", "tree.map", "tree_util.tree_map")
MULTIPROCESS_CALLS = {"process_count", "process_index", "initialize"}
SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def module_names(path: str, roots: tuple[str, ...]) -> list[str]:
    """The dotted names a file is imported by, one per root it is under (``pkg/mod.py`` -> ``pkg.mod``)."""
    out = []
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix) and path.endswith(".py"):
            parts = path[len(prefix):-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                out.append(".".join(parts))
    return out


def is_replicated_spec(node: ast.AST) -> bool:
    """``P()`` or ``P(None, ...)``: no dimension on any mesh axis."""
    return isinstance(node, ast.Call) and dotted(node.func) in _SPECS and not node.keywords \
        and all(isinstance(a, ast.Constant) and a.value is None for a in node.args)


@dataclass
class NameScope:
    node: ast.AST
    parent: NameScope | None
    module: str  # the file
    bound: set[str] = field(default_factory=set)
    cls: ast.ClassDef | None = None  # a method's class: self.f(...) is its f


@dataclass
class Program:
    """The files' syntax trees and what flows between them."""

    trees: dict[str, ast.Module]
    multiprocess_file: str | None = None  # a file that asks for the process count or starts jax.distributed
    multiprocess_line: int | None = None  # where in it
    initialize_file: str | None = None  # a file that calls jax.distributed.initialize
    scopes: dict[int, NameScope] = field(default_factory=dict)
    defs: dict[Node, ast.AST] = field(default_factory=dict)  # a bound name -> the function it is
    jitted: set[int] = field(default_factory=set)  # functions (or jit calls) whose calls return sharded arrays
    aliases: dict[Node, Node] = field(default_factory=dict)  # from m import x: (here, x) -> (m, x)
    module_of: dict[str, str] = field(default_factory=dict)  # dotted module name -> file
    module_aliases: dict[Node, str] = field(default_factory=dict)  # import m as k: (here, k) -> m's file
    marks: dict[str, set[Node]] = field(default_factory=lambda: defaultdict(set))
    flow: dict[Node, set[Node]] = field(default_factory=lambda: defaultdict(set))
    built_from: dict[Node, set[Node]] = field(default_factory=lambda: defaultdict(set))
    callees: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))  # scope -> functions it calls
    called_in_loop: dict[int, tuple[str, int]] = field(default_factory=dict)  # function -> the loop's call

    # ---- names -------------------------------------------------------------------------------
    def scope_of(self, stack: list[ast.AST], file: str) -> NameScope:
        for node in reversed(stack):
            if id(node) in self.scopes:
                return self.scopes[id(node)]
        return self.scopes[id(self.trees[file])]

    def resolve(self, name: str, scope: NameScope) -> Node:
        s: NameScope | None = scope
        while s is not None:
            if name in s.bound:
                key = (id(s.node), name)
                seen = 0
                while key in self.aliases and seen < 50:  # re-exports chain; a cycle stops
                    key, seen = self.aliases[key], seen + 1
                return key
            s = s.parent
        return (id(self.trees[scope.module]), name)

    def function(self, func: ast.expr, scope: NameScope) -> ast.AST | None:
        """The program's function a call's callee names, if it is one."""
        if isinstance(func, ast.Name):
            return self.defs.get(self.resolve(func.id, scope))
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "self":
                s: NameScope | None = scope
                while s is not None and s.cls is None:
                    s = s.parent
                if s is not None and s.cls is not None:
                    for item in s.cls.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == func.attr:
                            return item
                return None
            base = self.resolve(func.value.id, scope)
            target = self.module_aliases.get(base)
            if target is not None:
                return self.defs.get((id(self.trees[target]), func.attr))
        return None

    def returns_sharded(self, call: ast.Call, scope: NameScope) -> bool:
        if is_jit(call.func):
            return True
        fn = self.function(call.func, scope)
        if fn is not None and id(fn) in self.jitted:
            return True
        return isinstance(call.func, ast.Name) and self.resolve(call.func.id, scope) in self.marks[JITTED]

    # ---- values ------------------------------------------------------------------------------
    def value_nodes(self, expr: ast.AST | None, scope: NameScope) -> Iterator[Node]:
        """The nodes whose value ``expr`` is (or holds as it is: an element, a leaf, an attribute)."""
        if expr is None:
            return
        if isinstance(expr, ast.Name):
            yield self.resolve(expr.id, scope)
        elif isinstance(expr, (ast.Subscript, ast.Attribute, ast.Starred)):
            yield from self.value_nodes(expr.value, scope)
        elif isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            for e in expr.elts:
                yield from self.value_nodes(e, scope)
        elif isinstance(expr, ast.Dict):
            for e in expr.values:
                yield from self.value_nodes(e, scope)
        elif isinstance(expr, ast.IfExp):
            yield from self.value_nodes(expr.body, scope)
            yield from self.value_nodes(expr.orelse, scope)
        elif isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            yield from self.value_nodes(expr.elt, scope)
        elif isinstance(expr, ast.DictComp):
            yield from self.value_nodes(expr.value, scope)
        elif isinstance(expr, ast.Call):
            name = dotted(expr.func)
            fn = self.function(expr.func, scope)
            if fn is not None:
                yield (id(fn), RESULT)
            elif name in TREE_MAPS and expr.args and isinstance(expr.args[0], ast.Lambda):
                yield (id(expr.args[0]), RESULT)
            elif isinstance(expr.func, ast.Attribute) and expr.func.attr in ("items", "values", "get", "pop"):
                yield from self.value_nodes(expr.func.value, scope)
            elif name in ("zip", "enumerate", "reversed", "list", "tuple", "dict", "jax.tree.leaves",
                          "jax.tree_util.tree_leaves"):
                for a in expr.args:
                    yield from self.value_nodes(a, scope)

    def parts_nodes(self, expr: ast.AST, scope: NameScope) -> Iterator[Node]:
        """Every node an expression is built from, and the results of the program's functions it calls."""
        for n in ast.walk(expr):
            if isinstance(n, ast.Name):
                yield self.resolve(n.id, scope)
            elif isinstance(n, ast.Call):
                yield from self.value_nodes(n, scope)

    def starts(self, expr: ast.AST, scope: NameScope) -> set[str]:
        """The facts an expression holds by itself, before anything flows into it."""
        out = set()
        if any(is_replicated_spec(n) for n in ast.walk(expr)):
            out.add(REPLICATED)
        core = expr.elts[0] if isinstance(expr, ast.Tuple) and expr.elts else expr
        core = core.value if isinstance(core, ast.Subscript) else core
        if isinstance(core, ast.Call):
            if self.returns_sharded(core, scope):
                out |= {SHARDED, GLOBAL}
            if dotted(core.func).rsplit(".", 1)[-1] in _GLOBAL_MAKERS:
                out.add(GLOBAL)
        return out

    def holds(self, fact: str, expr: ast.AST, scope: NameScope, built: bool = False) -> bool:
        """Whether ``expr`` may hold ``fact`` (for REPLICATED with ``built``, anything it is built from)."""
        if fact in self.starts(expr, scope):
            return True
        nodes = self.parts_nodes(expr, scope) if built else self.value_nodes(expr, scope)
        return any(n in self.marks[fact] for n in nodes)

    def holds_only(self, fact: str, expr: ast.AST, scope: NameScope) -> bool:
        """Whether every value ``expr`` may be holds ``fact`` (a device_put of a global array)."""
        if fact in self.starts(expr, scope):
            return True
        nodes = list(self.value_nodes(expr, scope))
        return bool(nodes) and all(n in self.marks[fact] for n in nodes)

    def sharded_names(self, expr: ast.AST, scope: NameScope) -> list[str]:
        return sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name)
                       and self.resolve(n.id, scope) in self.marks[SHARDED]})
