"""The ``jax.jit(...)`` call behind a ``.lower(...)`` or ``.trace(...)`` line, read from the script's source.

A program's locations name the line that lowered or called the jitted function (``out[k] = jitted.lower(*args)``)
but not the ``jax.jit(step, ...)`` call where ``donate_argnums`` and ``out_shardings`` are written: a finding
about those options (SL202, SL201 on a stated out_shardings) belongs on that line. It is found here by
following the lowered name back through the script: an inline ``jax.jit(...)``, a name bound to one (or to a
function decorated with it), or a name bound from calling one of the script's functions that returns a name
bound to one. Where several ``jax.jit`` calls could be the one (a ``build`` that jits two layouts), those
whose options agree with the program's (``options``: it donates, or not) are kept; the line is given only
when one is left."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...passes.common.python_calls import JIT_NAMES, dotted, is_jit

_LOWERING = ("lower", "trace")


def _jit_decorated(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST | None:
    for dec in fn.decorator_list:
        if dotted(dec.func if isinstance(dec, ast.Call) else dec) in JIT_NAMES:
            return dec
    return None


# The keywords that spell one jit option.
DONATION = ("donate_argnums", "donate_argnames")
OUT_SHARDINGS = ("out_shardings",)


def jit_call_line(source: str, line: int, options: dict[tuple[str, ...], bool]) -> int | None:
    """The line of the ``jax.jit`` call whose jitted function is lowered at ``line`` of ``source``; among
    several candidates, the one whose keywords agree with ``options`` (DONATION -> whether the program
    donates), if it alone does. None when it cannot be told."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for call in ast.walk(tree):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _LOWERING
                and call.lineno <= line <= (call.end_lineno or call.lineno)):
            scope = _enclosing(tree, call) or tree
            found = list(dict.fromkeys(_jits_of(call.func.value, scope, functions, depth=0)))
            left = [j for j in found if all(any(_has_keyword(j, k) for k in names) == present
                                            for names, present in options.items())] if len(found) > 1 else found
            return getattr(left[0], "lineno", None) if len(left) == 1 else None
    return None


def _has_keyword(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and any(k.arg == name for k in node.keywords)


def _enclosing(tree: ast.AST, target: ast.AST) -> ast.AST | None:
    """The innermost function whose body holds ``target``."""
    best = None
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(n is target for n in ast.walk(fn)):
            if best is None or fn.lineno > best.lineno:
                best = fn
    return best


def _jits_of(expr: ast.AST, scope: ast.AST, functions: dict, depth: int, index: int | None = None,
             ) -> Iterator[ast.AST]:
    """The ``jax.jit`` calls (or decorators) the value of ``expr`` in ``scope`` may come from."""
    if depth > 4:
        return
    if is_jit(expr):
        yield expr
        return
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in functions:
        fn = functions[expr.func.id]
        for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return)):
            if ret.value is None:
                continue
            value: ast.expr = ret.value
            if index is not None and isinstance(value, ast.Tuple) and index < len(value.elts):
                value = value.elts[index]
            elif index is not None:
                continue
            yield from _jits_of(value, fn, functions, depth + 1)
        return
    if not isinstance(expr, ast.Name):
        return
    if expr.id in functions and (dec := _jit_decorated(functions[expr.id])) is not None:
        yield dec
        return
    for node in ast.walk(scope):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == expr.id:
                yield from _jits_of(node.value, scope, functions, depth + 1)
            elif isinstance(target, ast.Tuple):
                for k, elt in enumerate(target.elts):
                    if isinstance(elt, ast.Name) and elt.id == expr.id:
                        yield from _jits_of(node.value, scope, functions, depth + 1, index=k)
