"""Shardy's ``sdy-flatten-call-graph``, in Python: every function is called from
one place, so each call site is propagated on its own.

Shardy's import pipeline clones a function on its second and later calls (and,
recursively, the functions that clone calls), so two calls of ``@bar`` on
different shardings give ``@bar`` and ``@bar_0`` their own shardings instead of
one conflict. The propagation has to see the same program Shardy does, and the
same names: the order below is Shardy's ``walkCalls`` (functions in post-order of
MLIR's call graph, whose root reaches every function in module order; calls in
program order), and the names come from MLIR's ``SymbolTable::insert``, whose one
counter renames every clone (``bar_0``, then ``foo_1``...). Shardy also marks a
clone ``sdy.original_func_name``, which only its export reads (to merge clones
that ended up equal); left off here, Shardy's output keeps every clone, and each
of our values has its counterpart to be compared with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from jaxlib.mlir import ir

from ..stablehlo.module import functions
from .shardy_reference import clone, walk_ops

T = TypeVar("T")


def _calls(block: ir.Block) -> list[ir.OpView]:
    """The ``func.call`` ops under a block, in program order (nested regions included)."""
    return [op for op in walk_ops(block) if op.operation.name == "func.call"]


def _callee(call: ir.OpView) -> str:
    return str(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)


def needs_flattening(module: ir.Module) -> bool:
    """Whether some function is called from more than one place."""
    seen: set[str] = set()
    for fn in functions(module).values():
        for call in _calls(fn.regions[0].blocks[0]):
            name = _callee(call)
            if name in seen:
                return True
            seen.add(name)
    return False


def _post_order(funcs: dict[str, ir.OpView]) -> list[str]:
    """MLIR's call graph in post-order: the root's children are the functions in
    module order, a function's children its callees in call order."""
    children = {name: [_callee(c) for c in _calls(fn.regions[0].blocks[0])] for name, fn in funcs.items()}
    order: list[str] = []
    visited: set[str] = set()
    for root in funcs:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(children[root]))]
        while stack:  # iterative: a deep call chain must not hit Python's recursion limit
            name, pending = stack[-1]
            child = next((c for c in pending if c in funcs and c not in visited), None)
            if child is None:
                order.append(name)
                stack.pop()
            else:
                visited.add(child)
                stack.append((child, iter(children[child])))
    return order


def call_sites(funcs: dict[str, ir.OpView], where: Callable[[ir.Location], T | None]) -> dict[str, T | None]:
    """Each called function's call site: ``where`` of the call's location, or, where that names no line
    (a call inside a library's function, as ``jnp.fft``'s jitted helpers call each other), the caller's own
    call site. Worked out callers first: a clone of a nested helper comes before its caller in module order
    (``flatten_call_graph`` inserts the callee's clone first), so the caller's site is not yet known when
    the module is walked in order."""
    sites: dict[str, T | None] = {}
    for name in reversed(_post_order(funcs)):
        for call in _calls(funcs[name].regions[0].blocks[0]):
            callee = _callee(call)
            if callee in funcs and callee not in sites:
                sites[callee] = where(call.location) or sites.get(name)
    return sites


def flatten_call_graph(module: ir.Module) -> ir.Module:
    """The module itself when every function has at most one caller, else a copy in
    which second and later calls call clones (source locations kept)."""
    if not needs_flattening(module):
        return module
    out = clone(module)
    with module.context:
        table = ir.SymbolTable(out.operation)
        funcs = functions(out)

        # Every function by name, the clones too: a function cloned after its body's later calls were
        # redirected to clones (``mid`` calling ``inner`` twice, ``mid`` itself called twice) calls those
        # clones, which the module's first listing does not hold.
        by_name: dict[str, ir.OpView | ir.Operation] = dict(funcs)

        def clone_recursively(fn: ir.OpView | ir.Operation) -> str:
            copy = fn.operation.clone(ip=False)
            for call in _calls(copy.regions[0].blocks[0]):
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(clone_recursively(by_name[_callee(call)]))
            # Appended as MLIR's insert does; the table then renames it (the binding
            # does not place a detached op itself).
            ir.InsertionPoint(out.body).insert(copy)
            name = ir.StringAttr(table.insert(copy)).value
            by_name[name] = copy
            return name

        called: set[str] = set()
        for name in _post_order(funcs):
            for call in _calls(funcs[name].regions[0].blocks[0]):
                callee = _callee(call)
                if callee not in funcs:
                    continue
                if callee in called:
                    call.attributes["callee"] = ir.FlatSymbolRefAttr.get(clone_recursively(funcs[callee]))
                else:
                    called.add(callee)
    return out
