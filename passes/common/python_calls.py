"""A Python call's dotted name and whether it makes a jitted function, as the source rules and the analyzer's
reading of a script's jit calls (analyzer/inputs/jit_sites.py) both read them."""

from __future__ import annotations

import ast

# The calls that make a jitted function.
JIT_NAMES = ("jax.jit", "jit", "pjit", "jax.experimental.pjit.pjit")


def dotted(node: ast.AST) -> str:
    """``jax.numpy.sum`` for the attribute chain it names; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def is_jit(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and dotted(call.func) in JIT_NAMES
