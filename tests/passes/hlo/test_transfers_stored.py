"""find_collectives on the stored TPU and GPU texts (no compile, no CLI): every transfer once, with the
bytes the compiled text gives it, and a transfer with a piece outside every loop counted once per step.
The oracle is tests/stored_hlo.py's ``transfers`` (channel and chain ids, done shapes, loop bodies, read
with regular expressions); tests/analyzer/platforms/test_async_chains.py asks the same of ``check``."""

from collections import Counter

import pytest
from stored_hlo import COMPILED, compiled_text, releases, step_inputs, transfers

from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

STEPS = [pytest.param(r, n, id=f"{r}-{n}") for r in releases(COMPILED)
         for n in ("llama-512.tpu-v5e", "llama-1024.tpu-v5p", "fsdp-tp.tpu-v5e", "maxtext-like-scan.h100")]


@pytest.mark.parametrize("release, name", STEPS)
def test_every_transfer_once_with_the_texts_bytes(release, name):
    text = compiled_text(release, name)
    mesh, _ = step_inputs(text, name)
    found = find_collectives(parse_hlo_module(text), mesh).collectives
    oracle = transfers(text)
    assert Counter((c.kind, c.bytes) for c in found) == Counter((k, b) for k, b, _ in oracle.values())
    once = Counter((k, b) for k, b, outside in oracle.values() if outside)
    assert Counter((c.kind, c.bytes) for c in found if c.count == 1) >= once
    assert all(c.count >= 1 for c in found)
