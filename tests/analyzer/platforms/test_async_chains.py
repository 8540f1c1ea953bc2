"""Collective bytes once per transfer on TPU and GPU compiles, against the compiled text.

The oracle reads ``compiled.as_text()`` itself: one transfer per channel id (and libtpu's ``chain_id``,
which every piece of a split collective carries), its bytes the result an async start delivers (its
``-done``'s shape) or the collective's own result. TPU's async collective fusion clones one gather into
start, continuation and done pieces; a llama step's logits-weight gather (bf16[512,32000]) ran its
continuations inside the layer scan and was listed three times (counts 4, 4, 1). The tool reads the
same text through ``check`` (its HLO path: the parser and the collectives pass the lint command runs).

The texts are XLA's, compiled by JAX itself for 8 compile-only devices and stored per JAX release by
fixtures/generate_compiled_texts.py (a TPU compile of these takes minutes on two cores); every stored release's
texts are read on every JAX the suite runs on. test_stored_compiled_texts.py compiles one per platform live and
checks it is still the stored text.
"""

import glob
import gzip
import json
import os
from collections import Counter

import pytest
from conftest import FIXTURES
from stored_hlo import transfers

STORED = os.path.join(FIXTURES, "compiled")


def stored_texts() -> list[tuple[str, str]]:
    """(JAX release folder, PROGRAM.PLATFORM) of every stored compiled text."""
    out = []
    for manifest in sorted(glob.glob(os.path.join(STORED, "jax-*", "MANIFEST.json"))):
        with open(manifest, encoding="utf-8") as f:
            names = sorted(name for name in json.load(f) if not name.startswith("_"))
        out.extend((os.path.basename(os.path.dirname(manifest)), name) for name in names)
    return out


def stored_text(release: str, name: str) -> str:
    with gzip.open(os.path.join(STORED, release, f"{name}.hlo.gz"), "rt", encoding="utf-8") as f:
        return f.read()


def test_every_release_ci_runs_has_its_texts():
    releases = {release for release, _ in stored_texts()}
    assert {"jax-0.10", "jax-0.12"} <= releases, releases


@pytest.mark.parametrize("release, name", [pytest.param(r, n, id=f"{r}-{n}") for r, n in stored_texts()])
def test_collective_bytes_are_the_compiled_text_once_per_transfer(cli, tmp_path, release, name):
    hlo = stored_text(release, name)
    path = tmp_path / f"{name}.hlo"
    path.write_text(hlo)
    result = cli("check", str(path), "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    [t] = json.loads(result.out)["targets"]
    oracle = transfers(hlo)
    found = t["collectives"]
    assert Counter((c["kind"], c["bytes"]) for c in found) == Counter((k, b) for k, b, _ in oracle.values())
    assert sum(c["bytes"] for c in found) == sum(b for _, b, _ in oracle.values())
    # A transfer with a piece outside every loop (the logits gather: start and done in ENTRY, continuations
    # inside the layer scan) runs once per step: counted once, not once per layer.
    once = Counter((k, b) for k, b, outside in oracle.values() if outside)
    assert Counter((c["kind"], c["bytes"]) for c in found if c["count"] == 1) >= once
