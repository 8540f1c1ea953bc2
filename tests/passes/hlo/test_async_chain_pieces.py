"""The pieces of libtpu's async collective fusions on the TPU fixture (tpu_v5e_maxtext.hlo), read here
from the text: each chain step's role named by what calls its computation (a start or done fusion by
its name, a continuation by its continuation_config or its async_collective_fusion computation), and
each piece's chain_id attribute as written. Kills async_chains.py's one-line bugs that leave the
count right on this program only by chance (a chain id read from the wrong offset, a role test
negated or compared the wrong way)."""

import os
import re

import pytest
from conftest import FIXTURES

from jax_shard_lint.passes.hlo.async_chains import CONTINUATION, DONE, START, async_role, chain_id
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_FUSION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .* fusion\(.*\bcalls=%([\w.\-]+)(.*)$", re.M)


def _text() -> str:
    with open(os.path.join(FIXTURES, "hlo", "tpu_v5e_maxtext.hlo")) as f:
        return f.read()


def test_every_chain_id_is_the_texts():
    text = _text()
    module = parse_hlo_module(text)
    written = {m.group(1): m.group(2) for m in re.finditer(
        r'^\s*(?:ROOT )?%([\w.\-]+) = .*?\bchain_id="([^"]*)"', text, re.M)}
    assert len(written) >= 20 and len(set(written.values())) >= 9
    for comp in module.computations.values():
        for ins in comp.instructions:
            assert chain_id(ins.attr_text) == written.get(ins.name), ins.name
    assert chain_id('frontend_attributes={chain_id="12"}') == "12"
    assert chain_id('frontend_attributes={chain_id="12}') is None  # no closing quote: none read


def test_every_async_collective_fusions_role_is_the_texts():
    text = _text()
    module = parse_hlo_module(text)
    expected = {}
    for m in _FUSION.finditer(text):
        caller, callee, rest = m.groups()
        if "continuation_config" in rest or callee.startswith("async_collective_fusion"):
            expected[callee] = CONTINUATION
        elif caller.startswith("async-collective-start"):
            expected[callee] = START
        elif caller.startswith("async-collective-done"):
            expected[callee] = DONE
    assert set(expected.values()) == {START, CONTINUATION, DONE}
    for callee, role in expected.items():
        assert async_role(module, callee) == role, callee
    # The computations no async step calls (the entry, a loop's body) have no role.
    assert async_role(module, module.entry) is None
    bodies = set(re.findall(r"\bbody=%([\w.\-]+)", text))
    assert bodies and all(async_role(module, b) is None for b in bodies)
