"""A compile that ran beside another and saw XLA's partitioner warning ("Involuntary full rematerialization")
does not compile its whole program again to learn whose the warning is (analyzer/adapter/native_stderr.py,
compiled_with_warnings): it takes the lines its own thread logged where the compile runs on the thread that
asked (jax 0.12), else it runs a compile for the warnings alone (fusion emitters off, -O0: jax 0.10.2), whose
warnings are XLA's default compile's. The oracle is XLA's own stderr: the warnings of each program compiled by
itself at XLA's default options."""

import re
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from jax._src import compiler
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.adapter import compiling, jax_adapter, native_stderr
from jax_shard_lint.passes.hlo.involuntary_remat import is_partitioner_warning


def _mesh():
    return jax.make_mesh((2, 4), ("model", "data"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def _remat_text(mesh) -> str:
    """Both axes moved to one other dimension at once: no collective does it, XLA replicates (SL104's fixture)."""
    def at_once(a):
        return jax.lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(None, ("data", "model"), None)))

    x = jax.ShapeDtypeStruct((16, 64, 32), jnp.float32, sharding=NamedSharding(mesh, P("model", None, "data")))
    return jax_adapter.stablehlo_text(jax.jit(at_once).lower(x))


def _clean_text(mesh) -> str:
    """A step that reshards with collectives only, long enough to compile that another compile runs inside it."""
    def layers(h, ws):
        for w in ws:
            h = jnp.sin(h @ w)
        return h

    spec = NamedSharding(mesh, P("data", "model"))
    h = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=spec)
    ws = [jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))] * 24
    return jax_adapter.stablehlo_text(jax.jit(layers).lower(h, ws))


def _lines(text: str) -> list[str]:
    """The warnings without absl's prefix (time, thread), one each."""
    return sorted({re.sub(r"^\S+ \S+\s+\d+ \S+\] ", "", line) for line in text.splitlines()})


def _alone(text: str) -> list[str]:
    """The program compiled by itself, at XLA's default options: its warnings are its own."""
    return _lines(jax_adapter.compile_stablehlo_text(text, 8, with_reports=False).compiler_warnings)


def test_a_warning_seen_beside_another_compile_is_its_own_without_a_second_whole_compile(monkeypatch):
    mesh = _mesh()
    remat, clean = _remat_text(mesh), _clean_text(mesh)
    remat_alone, clean_alone = _alone(remat), _alone(clean)
    assert remat_alone and not clean_alone  # XLA warns for the one and not the other

    whole, for_warnings = [], []
    compile_and_load = compiler.backend_compile_and_load

    def counted(backend, module, devices, options, *rest):
        overrides = options.env_option_overrides
        kind = for_warnings if any(k == "xla_cpu_use_fusion_emitters" for k, _ in overrides) else whole
        kind.append(threading.get_native_id())
        return compile_and_load(backend, module, devices, options, *rest)

    monkeypatch.setattr(compiler, "backend_compile_and_load", counted)
    results = {}

    def compile_clean():
        results["clean"] = jax_adapter.compile_stablehlo_text(clean, 8, with_reports=False)

    beside = threading.Thread(target=compile_clean)
    beside.start()
    deadline = time.monotonic() + 60
    while not native_stderr._SHARED.active and beside.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    results["remat"] = jax_adapter.compile_stablehlo_text(remat, 8, with_reports=False)
    beside.join()

    assert _lines(results["remat"].compiler_warnings) == remat_alone
    assert _lines(results["clean"].compiler_warnings) == clean_alone == []
    # Each program compiled whole once; jax 0.10.2 compiles the two for their warnings alone (its compiles run
    # on XLA's own threads, so a line does not say whose it is), jax 0.12 none (each line names its thread).
    assert len(whole) == 2
    assert len(for_warnings) in (0, 2)


def test_the_warnings_only_compile_warns_as_xlas_default_compile():
    mesh = _mesh()
    for text in (_remat_text(mesh), _clean_text(mesh)):
        module = jax_adapter.parse_stablehlo(text)
        devices = jax.devices()[:8]
        again = compiling._warnings_only_compile(lambda: None, module, devices, 8)
        with native_stderr.capture_native_stderr(is_partitioner_warning) as warned:
            executable = again()
        if compiling._WARNINGS_ONLY_REFUSED:
            pytest.skip("no xla_cpu_use_fusion_emitters in this jaxlib (jax 0.12: warnings told apart by thread)")
        assert executable is not None
        assert _lines(warned.text) == _alone(text)
