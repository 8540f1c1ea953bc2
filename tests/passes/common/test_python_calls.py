"""python_calls (a call's dotted name, whether it makes a jitted function) asked about every call of the example
scripts the source rules read (examples/, examples/models/). No compile.

The oracle is Python's own ``ast.unparse`` of the called expression: a name or a chain of attributes on a name
unparses to the dotted name itself; any other callee (a call's result, a subscript, a lambda) is no name."""

import ast
import glob
import os
import re

import pytest
from conftest import ROOT

from jax_shard_lint.passes.common.python_calls import JIT_NAMES, dotted, is_jit

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CHAIN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")) + glob.glob(os.path.join(ROOT, "examples",
                                                                                           "models", "*.py")))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_a_calls_dotted_name_is_its_callee_unparsed_and_jit_calls_are_the_jit_names(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            assert not is_jit(node)
            continue
        text = ast.unparse(node.func)
        if _CHAIN.fullmatch(text):
            assert dotted(node.func) == text
            assert is_jit(node) == (text in JIT_NAMES), text
        elif not isinstance(node.func, ast.Attribute):
            assert dotted(node.func) == "" and not is_jit(node), text


def test_the_examples_make_jitted_functions():
    """The scripts' jax.jit calls count (the test above would hold of an is_jit that never says yes)."""
    found = set()
    for path in SCRIPTS:
        with open(path, encoding="utf-8") as f:
            found |= {ast.unparse(n.func) for n in ast.walk(ast.parse(f.read())) if isinstance(n, ast.Call)
                      and is_jit(n)}
    assert "jax.jit" in found
