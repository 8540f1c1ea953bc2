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
import re
from collections import Counter

import pytest
from conftest import FIXTURES

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


_LINE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) (all-gather|all-reduce|reduce-scatter|all-to-all|"
                   r"collective-permute|collective-broadcast|ragged-all-to-all)(-start)?\((.*)$", re.M)
_DONE = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (.*?) [\w\-]+-done\(%([\w.\-]+)\)", re.M)
_ARRAY = re.compile(r"\b(f32|bf16|s32|u32|f16|s8|u8|pred|s64|u64|f64|f8e4m3fn|f8e5m2)\[([\d,]*)\]")
_WIDTH = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "u64": 8,
          "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1}
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$")
_CALLED = re.compile(r"(?:calls|body|condition|to_apply|true_computation|false_computation)=%([\w.\-]+)")
_LOOP_BODY = re.compile(r"(?:body|condition)=%([\w.\-]+)")


def _bytes(shape_text):
    total = 0
    for dtype, dims in _ARRAY.findall(shape_text):
        size = _WIDTH[dtype]
        for d in filter(None, dims.split(",")):
            size *= int(d)
        total += size
    return total


def transfers(hlo):
    """{transfer key: (kind, per-device bytes, whether a piece of it runs outside every loop)} from the compiled
    text: clones of one collective share its channel id (and chain id); an async start's bytes are its
    done's result."""
    done_shape = {start: shape for shape, start in _DONE.findall(hlo)}
    computation_of, called, current = {}, {}, None
    for line in hlo.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = m.group(2)
            called[current] = set()
        elif current and " = " in line:
            computation_of[line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%")] = current
            called[current] |= set(_CALLED.findall(line))
    in_loop = set()
    work = [c for line in hlo.splitlines() if " while(" in line for c in _LOOP_BODY.findall(line)]
    while work:
        c = work.pop()
        if c not in in_loop:
            in_loop.add(c)
            work.extend(called.get(c, ()))
    out = {}
    for name, shape, kind, start, rest in _LINE.findall(hlo):
        channel = re.search(r"channel_id=(\d+)", rest)
        chain = re.search(r'chain_id="(\d+)"', rest)
        key = (channel.group(1), chain.group(1) if chain else None) if channel else name
        if start:
            nbytes = _bytes(done_shape[name]) if name in done_shape else _bytes(shape) // 2
        else:
            nbytes = _bytes(shape)
        kind_, nbytes_, outside = out.get(key, (kind, nbytes, False))
        assert (kind_, nbytes_) == (kind, nbytes), f"channel {key}: pieces of two shapes"
        out[key] = (kind, nbytes, outside or computation_of[name] not in in_loop)
    return out


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
