"""Building the whole program of source_program.py: scopes and the names they bind, imports
resolved between the program's files, the edges values flow along, and the walk that spreads each
fact over them. One pass over every file's syntax tree and one over the edges."""

from __future__ import annotations

import ast
from collections import deque

from ..common.python_calls import dotted, is_jit
from .source_program import (
    GLOBAL,
    JITTED,
    MULTIPROCESS_CALLS,
    REPLICATED,
    RESULT,
    SCOPE_NODES,
    SHARDED,
    TREE_MAPS,
    NameScope,
    Node,
    Program,
    module_names,
)


def _params(fn: ast.AST) -> list[str]:
    a = fn.args  # type: ignore[attr-defined]
    return [p.arg for p in a.posonlyargs + a.args]


def _kwparams(fn: ast.AST) -> set[str]:
    a = fn.args  # type: ignore[attr-defined]
    return {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}


def _target_names(t: ast.AST) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    if isinstance(t, ast.Subscript):  # d[k] = v: d holds v
        base: ast.AST = t
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        return [base.id] if isinstance(base, ast.Name) else []
    return []


def _is_jit_decorated(fn: ast.AST) -> bool:
    for dec in getattr(fn, "decorator_list", []):
        base = dotted(dec.func if isinstance(dec, ast.Call) else dec)
        if base in ("jax.jit", "jit") or (base in ("functools.partial", "partial") and isinstance(dec, ast.Call)
                                           and dec.args and dotted(dec.args[0]) in ("jax.jit", "jit")):
            return True
    return False


class _Builder:
    def __init__(self, program: Program, roots: tuple[str, ...]):
        self.p = program
        self.roots = roots
        self.calls: list[tuple[ast.Call, NameScope, bool]] = []  # the call, where, inside a loop
        self.statements: list[tuple[ast.AST, NameScope]] = []
        self.loop_calls: dict[int, tuple[str, int]] = {}  # a function called in a loop -> the first such call
        self.edges: list[tuple[ast.AST, Node, NameScope]] = []  # what flows into a name, as it is

    # ---- pass 1: scopes, bindings, imports -----------------------------------------------------
    def declare(self, file: str, tree: ast.Module) -> None:
        top = NameScope(tree, None, file)
        self.p.scopes[id(tree)] = top
        self._visit(tree, top, None, False)

    def _visit(self, node: ast.AST, scope: NameScope, cls: ast.ClassDef | None, in_loop: bool) -> None:
        loop = isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        for child in ast.iter_child_nodes(node):
            inside = in_loop or (loop and child is not getattr(node, "iter", None))  # a for's iterable: once
            if isinstance(child, SCOPE_NODES):
                if not isinstance(child, ast.Lambda):
                    for d in child.decorator_list:
                        self._visit_expr(d, scope)
                    if cls is None:
                        scope.bound.add(child.name)
                        self.p.defs[(id(scope.node), child.name)] = child
                    if _is_jit_decorated(child):
                        self.p.jitted.add(id(child))
                inner = NameScope(child, scope, scope.module, cls=cls)
                a = child.args
                inner.bound |= {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
                inner.bound |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
                self.p.scopes[id(child)] = inner
                if isinstance(child, ast.Lambda):
                    self.statements.append((child, inner))
                self._visit(child, inner, None, False)
            elif isinstance(child, ast.ClassDef):
                scope.bound.add(child.name)
                self._visit(child, scope, child, inside)
            else:
                self._bind(child, scope, inside)
                self._visit(child, scope, cls, inside)

    def _visit_expr(self, node: ast.AST, scope: NameScope) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                self.calls.append((n, scope, False))

    def _bind(self, node: ast.AST, scope: NameScope, in_loop: bool) -> None:
        if isinstance(node, ast.Call):
            self.calls.append((node, scope, in_loop))
            name = dotted(node.func)
            if (name.startswith("jax.") and name.rsplit(".", 1)[-1] in MULTIPROCESS_CALLS) \
                    or name in ("process_count", "process_index"):
                if self.p.multiprocess_file is None:
                    self.p.multiprocess_file, self.p.multiprocess_line = scope.module, node.lineno
            if name in ("jax.distributed.initialize", "distributed.initialize"):
                self.p.initialize_file = self.p.initialize_file or scope.module
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
            if is_jit(node.value):
                for t in targets:
                    for n in _target_names(t):
                        self.p.defs[(id(scope.node), n)] = node.value
                self.p.jitted.add(id(node.value))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node, scope)
            return
        else:
            if isinstance(node, (ast.Return, ast.Expr)):
                self.statements.append((node, scope))
            return
        for t in targets:
            scope.bound.update(_target_names(t))
        self.statements.append((node, scope))

    def _import(self, node: ast.Import | ast.ImportFrom, scope: NameScope) -> None:
        here = id(scope.node)
        if isinstance(node, ast.Import):
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                scope.bound.add(local)
                file = self.p.module_of.get(a.name if a.asname else local)
                if file:
                    self.p.module_aliases[(here, local)] = file
            return
        base = node.module or ""
        if node.level:
            names = module_names(scope.module, self.roots)
            if not names:
                return
            package = names[0].split(".")
            if not scope.module.endswith("__init__.py"):
                package = package[:-1]
            package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            base = ".".join(package + ([base] if base else []))
        for a in node.names:
            local = a.asname or a.name
            scope.bound.add(local)
            submodule = self.p.module_of.get(f"{base}.{a.name}" if base else a.name)
            if submodule:
                self.p.module_aliases[(here, local)] = submodule
            elif base in self.p.module_of:
                self.p.aliases[(here, local)] = (id(self.p.trees[self.p.module_of[base]]), a.name)

    # ---- pass 2: edges -----------------------------------------------------------------------
    def edge(self, values: ast.AST | None, target: Node, scope: NameScope, leaf: bool = False) -> None:
        if values is None:
            return
        if not leaf:
            self.edges.append((values, target, scope))
        for fact in self.p.starts(values, scope) - ({SHARDED, GLOBAL} if leaf else set()):
            self.p.marks[fact].add(target)
        for n in self.p.value_nodes(values, scope):
            self.p.flow[n].add(target)
        for n in self.p.parts_nodes(values, scope):
            self.p.built_from[n].add(target)

    def connect(self) -> None:
        for node, scope in self.statements:
            here = id(scope.node)
            if isinstance(node, ast.Lambda):
                self.edge(node.body, (here, RESULT), scope)
            elif isinstance(node, ast.Return):
                self.edge(node.value, (here, RESULT), scope)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    for n in _target_names(t):
                        self.edge(node.value, self.p.resolve(n, scope), scope)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
                for n in _target_names(node.target):
                    self.edge(node.value, self.p.resolve(n, scope), scope)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for n in _target_names(node.target):
                    self.edge(node.iter, self.p.resolve(n, scope), scope, leaf=True)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for n in _target_names(node.optional_vars):
                    self.edge(node.context_expr, self.p.resolve(n, scope), scope)
        for call, scope, in_loop in self.calls:
            self._call(call, scope, in_loop)

    def _call(self, call: ast.Call, scope: NameScope, in_loop: bool) -> None:
        fn = self.p.function(call.func, scope)
        args: list[ast.expr] = list(call.args)
        leaf = False
        if fn is None and dotted(call.func) in TREE_MAPS and call.args:
            mapped = call.args[0]
            fn = mapped if isinstance(mapped, ast.Lambda) else self.p.function(mapped, scope)
            args, leaf = list(call.args[1:]), True
        if fn is None or not isinstance(fn, SCOPE_NODES):
            return
        self.p.callees[id(scope.node)].add(id(fn))
        if in_loop and id(scope.node) not in self.p.jitted:  # a jitted body's loop is traced once
            self.loop_calls.setdefault(id(fn), (scope.module, call.lineno))
        params = _params(fn)
        if isinstance(call.func, ast.Attribute) and dotted(call.func.value) == "self" and params[:1] == ["self"]:
            params = params[1:]
        for p, a in zip(params, args):
            if not isinstance(a, ast.Starred):
                self.edge(a, (id(fn), p), scope, leaf)
        named = _kwparams(fn)
        for k in call.keywords:
            if k.arg in named:
                self.edge(k.value, (id(fn), k.arg), scope, leaf)


def _spread(starts: set[Node], *edges: dict[Node, set[Node]]) -> set[Node]:
    seen = set(starts)
    todo = deque(starts)
    while todo:
        n = todo.popleft()
        for graph in edges:
            for m in graph.get(n, ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
    return seen


def build_program(trees: dict[str, ast.Module], roots: tuple[str, ...]) -> Program:
    """The program of ``trees`` (file -> syntax tree); ``roots``: the folders modules are named from
    (the script's, and the configured first-party ones)."""
    program = Program(dict(sorted(trees.items())))
    for file in program.trees:
        for name in module_names(file, roots):
            program.module_of.setdefault(name, file)
    builder = _Builder(program, roots)
    for file, tree in program.trees.items():
        builder.declare(file, tree)
    builder.connect()
    # A jitted function passed as a value (``iterate(step_fn=jax.jit(bellman))``, a callback) is one where
    # it arrives: a call of that parameter returns sharded arrays as a call of the function would.
    program.marks[JITTED] = _spread({node for node, fn in program.defs.items() if id(fn) in program.jitted},
                                    program.flow)
    for values, target, scope in builder.edges:
        core = values.elts[0] if isinstance(values, ast.Tuple) and values.elts else values
        core = core.value if isinstance(core, ast.Subscript) else core
        if isinstance(core, ast.Call) and isinstance(core.func, ast.Name) \
                and program.resolve(core.func.id, scope) in program.marks[JITTED]:
            program.marks[SHARDED].add(target)
    program.marks[SHARDED] = _spread(program.marks[SHARDED], program.flow)
    program.marks[GLOBAL] = _spread(program.marks[GLOBAL] | program.marks[SHARDED], program.flow)
    program.marks[REPLICATED] = _spread(program.marks[REPLICATED], program.flow, program.built_from)
    program.called_in_loop = _spread_sites(builder.loop_calls, program.callees)
    return program


def _spread_sites(seeds: dict[int, tuple[str, int]], callees: dict[int, set[int]]) -> dict[int, tuple[str, int]]:
    """Every function a loop calls, directly or through others, with the loop's call that reaches it."""
    out = dict(seeds)
    todo = deque(sorted(seeds, key=lambda k: seeds[k]))
    while todo:
        fn = todo.popleft()
        for callee in callees.get(fn, ()):
            if callee not in out:
                out[callee] = out[fn]
                todo.append(callee)
    return out
