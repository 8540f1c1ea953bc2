"""The stored compiled texts (fixtures/compiled/, written by fixtures/generate_compiled_texts.py) are still what
XLA compiles on the JAX the suite runs on: one program per platform compiled live, its text byte for byte and
its ``memory_analysis()`` against the stored ones. The text is compared without what names the caller's
files (the stack-frame tables, each op's ``metadata`` and the fingerprint taken before it): those hold the path
of the checkout and of the script that compiled it. A Pallas kernel's ``debug_locations`` go too: they hold the
path JAX is installed at (CI's fresh virtual environment compiled the same kernel with other bytes there).
Each live compile is one the suite makes anyway, shared through tests/shared_compiles.py (the TPU targets'
and Pallas tests' oracles, test_tpu_targets.py)."""

import difflib
import gzip
import hashlib
import json
import os
import re

import jax
import pytest
from ci_deps import missing, needs
from conftest import FIXTURES
from shared_compiles import direct_compiles

LIVE = {  # PROGRAM.PLATFORM: the module its platform needs
    "fsdp-tp.tpu-v5p": "libtpu",
    # The MaxText-like step (its Pallas kernel) at the size the TPU tests compile it: their oracle's compile.
    "maxtext-small.tpu-v5e": "libtpu",
    "fsdp-tp.h100": "jax_plugins.xla_cuda12",
}
REGENERATE = "regenerate them: python fixtures/generate_compiled_texts.py (with this JAX)"
_FRAME_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def without_locations(text: str) -> str:
    blocks = [b for b in text.split("\n\n") if b.split("\n", 1)[0] not in _FRAME_TABLES]
    text = re.sub(r", metadata=\{[^{}]*\}", "", "\n\n".join(blocks))
    text = re.sub(r'"debug_locations":"[A-Za-z0-9+/=]*"', '"debug_locations":""', text)
    return re.sub(r'fingerprint_before_lhs="[0-9a-f]+"', "", text)


def first_differences(stored: str, live: str, lines: int = 12) -> str:
    """The first differing lines, each cut to 300 characters (a whole TPU text is megabytes)."""
    diff = difflib.unified_diff(stored.splitlines(), live.splitlines(), "stored", "compiled here", n=0, lineterm="")
    return "\n".join(line[:300] for _, line in zip(range(lines), diff))


def _manifest():
    release = "jax-" + ".".join(jax.__version__.split(".")[:2])
    path = os.path.join(FIXTURES, "compiled", release, "MANIFEST.json")
    if not os.path.exists(path):
        missing(f"no compiled texts stored for {release}: {REGENERATE}")
    with open(path, encoding="utf-8") as f:
        return os.path.dirname(path), json.load(f)


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs(m, f"{m} is not installed")) for n, m in LIVE.items()])
def test_the_stored_text_is_what_xla_compiles_here(name):
    folder, manifest = _manifest()
    entry = manifest[name]
    [compiled] = direct_compiles(entry["example"], entry["platform"], entry["devices"], **entry["parameters"]).values()
    text = compiled.as_text()
    with gzip.open(os.path.join(folder, f"{name}.hlo.gz"), "rt", encoding="utf-8") as f:
        stored = f.read()
    assert hashlib.sha256(stored.encode("utf-8")).hexdigest() == entry["sha256"]  # the file the generator wrote
    stored_program, live_program = without_locations(stored), without_locations(text)
    assert stored_program == live_program, (f"{name}: XLA compiles another text than the stored one ({REGENERATE}):\n"
                                            + first_differences(stored_program, live_program))
    assert "ENTRY" in without_locations(stored)  # what is compared is the program itself
    m = compiled.memory_analysis()
    assert entry["memory_analysis"] == {
        "argument_bytes": m.argument_size_in_bytes, "output_bytes": m.output_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes, "alias_bytes": m.alias_size_in_bytes}
