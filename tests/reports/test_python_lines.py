"""The Python suggest prints, folded over lines: the same program (same AST), one argument path a line."""

from __future__ import annotations

import ast

import pytest

from jax_shard_lint.reports.common.python_lines import folded

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

PATHS = [f"['model']['layers']['{i}']['self_attn']['{w}_proj']['kernel']" for i in range(4) for w in "qkvo"]
TABLE = ", ".join(f"{p!r}: NamedSharding(mesh, P('data', 'model'))" for p in PATHS)
JIT = ("jax.jit(step, in_shardings=({'lm_head': {'kernel': NamedSharding(mesh, P('data', 'model'))}}, "
       f"jax.tree_util.tree_map_with_path(lambda path, _: {{{TABLE}}}[jax.tree_util.keystr(path)], opt_state), "
       "NamedSharding(mesh, P('data', None))), out_shardings=(NamedSharding(mesh, P()),), "
       "donate_argnames=('params', 'opt_state'))")


def test_folded_text_is_the_same_program_one_path_a_line():
    text = "# a comment line, (kept as written\n" + JIT
    out = folded(text)
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(text))
    compile(out, "<suggested>", "exec")
    lines = out.splitlines()
    assert lines[0] == "# a comment line, (kept as written"
    for path in PATHS:
        [line] = [ln for ln in lines if repr(path) in ln]
        assert line.strip().rstrip(",") == f"{path!r}: NamedSharding(mesh, P('data', 'model'))"
    assert "out_shardings=(NamedSharding(mesh, P()),)," in [ln.strip() for ln in lines]  # its one-tuple comma kept
    assert "lambda path, _: {" in out  # a lambda's parameters are not split


def test_short_lines_and_unbalanced_text_are_left_as_written():
    assert folded("f((x), (y,))") == "f((x), (y,))"
    unbalanced = "x = f(" + "a, " * 60
    assert folded(unbalanced) == unbalanced
    single = "f(" + "(" + "y" * 120 + ")" + ")"
    assert ast.dump(ast.parse(folded(single, 20))) == ast.dump(ast.parse(single))
