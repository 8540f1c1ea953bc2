"""What the source rules read: a script's AST and the facts they share (jitted functions,
loops, sharded names), found without importing it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..common.python_calls import dotted, is_jit
from ..models.report import SourceLocation

_MULTIPROCESS = {"process_count", "process_index", "initialize"}




def has_keyword(call: ast.Call, name: str) -> bool:
    return any(k.arg == name for k in call.keywords)


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def assigned_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*(assigned_names(e) for e in node.elts)) if node.elts else set()
    return set()


@dataclass
class ScriptFacts:
    file: str
    jitted: dict[str, ast.AST] = field(default_factory=dict)  # name -> jit call or decorated def
    jitted_without_out_shardings: set[str] = field(default_factory=set)
    sharded: set[str] = field(default_factory=set)
    jitted_bodies: set[int] = field(default_factory=set)  # ids of FunctionDef nodes that are jitted
    multiprocess: bool = False
    # The whole program this file is part of (source_program.Program, which reads this module's helpers:
    # typed Any so that the two do not import each other): what flows into this file from the others.
    program: Any = None


# What a source rule sees: the script's syntax tree and the facts gathered from it.
SourceContext = tuple[ast.Module, ScriptFacts]


def collect_facts(tree: ast.Module, file: str) -> ScriptFacts:
    facts = ScriptFacts(file)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _MULTIPROCESS and dotted(node.value) in (
                "jax", "jax.distributed"):
            facts.multiprocess = True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                call = dec if isinstance(dec, ast.Call) else None
                base = dotted(dec.func if isinstance(dec, ast.Call) else dec)
                if base in ("jax.jit", "jit") or (base in ("functools.partial", "partial") and call and call.args
                                                   and dotted(call.args[0]) in ("jax.jit", "jit")):
                    facts.jitted[node.name] = node
                    facts.jitted_bodies.add(id(node))
                    if not (call and has_keyword(call, "out_shardings")):
                        facts.jitted_without_out_shardings.add(node.name)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and is_jit(node.value):
            for name in assigned_names(node.targets[0]):
                facts.jitted[name] = node.value
                if not has_keyword(node.value, "out_shardings"):
                    facts.jitted_without_out_shardings.add(name)
    # Names bound from calling a jitted function hold sharded results.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and dotted(node.value.func) in facts.jitted:
            for t in node.targets:
                facts.sharded |= assigned_names(t)
    return facts


def loops(tree: ast.Module) -> Iterator[ast.For | ast.While | ast.AsyncFor]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            yield node


def inside_jit(node_stack: list[ast.AST], facts: ScriptFacts) -> bool:
    return any(id(n) in facts.jitted_bodies for n in node_stack)


def walk_with_stack(tree: ast.AST) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    stack: list[ast.AST] = []

    def visit(node: ast.AST) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
        stack.append(node)
        yield node, stack
        for child in ast.iter_child_nodes(node):
            yield from visit(child)
        stack.pop()

    yield from visit(tree)


def location(facts: ScriptFacts, node: ast.stmt | ast.expr) -> SourceLocation:
    return SourceLocation(file=facts.file, line=node.lineno)
