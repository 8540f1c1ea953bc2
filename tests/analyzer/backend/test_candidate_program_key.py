"""Within one target's fix checks, a candidate is keyed by the program XLA compiles: its StableHLO printed without
source locations (analyzer/backend/candidate_compile.program_key, the analysis cache's key for a candidate's
figures), its devices and the settings. A candidate whose program is lint's own (``as_written_known``) is measured
on lint's compile, and one that differs from a compiled candidate only in its locations on that compile: neither
is compiled again.

The oracle is XLA: each pair the key makes one, compiled apart here, gives the same ``memory_analysis()`` and the
same optimized HLO (metadata and instruction names aside), and lint's compile of the jitted step the same
memory figures as a compile of its text re-printed by the entry edit with no change."""

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend import side_by_side
from jax_shard_lint.analyzer.backend.candidate_compile import as_written_known, compiled_candidate
from jax_shard_lint.analyzer.backend.run_target import resolve_run_target
from jax_shard_lint.analyzer.backend.sharding_edits import with_entry_shardings
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.passes.pipelines.entry import entry_signature
from jax_shard_lint.passes.pipelines.fix_checks import FIX_CHECKS


def _lowered():
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    def step(w, x):
        return jnp.tanh(x @ w), w * 0.9

    w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P(None, "x")))
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(step).lower(w, x)


_TABLES = re.compile(r"^(\d+ |FileNames|FunctionNames|FileLocations|StackFrames)")


def _optimized(program) -> str:
    """The optimized HLO's computations: the stack-frame tables (FileNames ... StackFrames, numbered lines) and
    each instruction's metadata hold the source locations, and XLA names instructions after their op_name (the
    location's) and numbers them in the order it makes them: names are left out, opcodes, shapes and operands kept."""
    body = "\n".join(line for line in program.hlo_text.splitlines() if line.strip() and not _TABLES.match(line))
    return re.sub(r"%[\w.\-]+", "%", re.sub(r", metadata=\{[^}]*\}", "", body))


@pytest.fixture
def compiled_texts(monkeypatch):
    """Every StableHLO text handed to XLA, counted."""
    texts: Counter = Counter()
    real = jax_adapter.compile_stablehlo_text

    def counting(text, *args, **kwargs):
        texts[text] += 1
        return real(text, *args, **kwargs)

    monkeypatch.setattr(jax_adapter, "compile_stablehlo_text", counting)
    return texts


def test_a_candidate_that_is_a_compiled_program_but_for_its_locations_is_not_compiled_again(compiled_texts):
    lowered = _lowered()
    text = jax_adapter.stablehlo_text(lowered)
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    devices = jax_adapter.device_assignment(lowered)
    settings, _ = resolve_run_target(Settings(platform="cpu", devices=8, cache_dir=None))
    written = compiled_candidate("step", text, sig, settings, "here", devices)  # stands for lint's report
    assert written.memory is not None and sum(compiled_texts.values()) == 1
    unchanged = with_entry_shardings(module, {}, sig.mesh_name)
    moved = with_entry_shardings(module, {}, sig.mesh_name, {0: [["x"], []]})
    bare = jax_adapter.text_without_locations(moved)
    assert bare != moved and "loc(" in moved and "loc(" not in bare
    with side_by_side.one_compile_per_program():
        as_written_known(written, text, sig, settings, "here", devices)
        for same in (unchanged, jax_adapter.text_without_locations(text)):
            assert compiled_candidate("step", same, sig, settings, "here", devices) is written
        first = compiled_candidate("step", moved, sig, settings, "here", devices)
        assert compiled_candidate("step", bare, sig, settings, "here", devices) is first
    assert sum(compiled_texts.values()) == 2 and compiled_texts[moved] == 1
    # Outside the checks' scope each is compiled: the key is within one target's checks only.
    compiled_candidate("step", bare, sig, settings, "here", devices)
    assert compiled_texts[bare] == 1

    def compile_(t):
        return jax_adapter.compile_stablehlo_text(t, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids,
                                                  with_reports=False, optimize_machine_code=False)

    a, b = compile_(moved), compile_(bare)
    assert a.memory == b.memory and _optimized(a) == _optimized(b)
    assert first.memory is not None and first.memory.peak_bytes != written.memory.peak_bytes
    own = jax_adapter.compile_lowered(lowered, with_reports=False, optimize_machine_code=False)
    assert compile_(unchanged).memory == own.memory
