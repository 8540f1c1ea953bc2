"""``suggest`` in this process compiles its versions side by side, a thread per core, and starts the ones
that do not depend on the solve (the written program, the baselines, the single moves) before solving: the
report is the one compiling them one after another after the solve gives (one core: the order before),
byte for byte, and every version the report compares was compiled by XLA in this run (no analysis cache).

The oracle for "compiled while the solver ran" is the order of XLA's compiles against the solver's: texts
are handed to XLA before the first solve returns."""

import os
import threading

import pytest

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.passes.pipelines import suggest as suggest_pipeline

MODEL = os.path.join("examples", "models", "optax_adamw_mlp.py")
ARGS = ("suggest", MODEL, "--set", "batch=16", "--set", "seq=64", "--no-cache", "--format", "json")


def _recording(monkeypatch, events: list[str], lock: threading.Lock) -> None:
    real_compile, real_solve = jax_adapter.compile_stablehlo_text, suggest_pipeline.solve

    def compiling(text, *args, **kwargs):
        with lock:
            events.append("compile:" + text)
        return real_compile(text, *args, **kwargs)

    def solving(*args, **kwargs):
        solution = real_solve(*args, **kwargs)
        with lock:
            events.append("solved")
        return solution

    monkeypatch.setattr(jax_adapter, "compile_stablehlo_text", compiling)
    monkeypatch.setattr(suggest_pipeline, "solve", solving)


@pytest.mark.slow  # two suggest runs of a model library's step, about 12 compiles each
def test_side_by_side_report_is_the_one_after_another_report(cli, monkeypatch):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: suggest compiles one version after another")
    events: list[str] = []
    _recording(monkeypatch, events, threading.Lock())
    side = cli(*ARGS)
    assert side.code == 0, side.err[-2000:]
    compiles_side = sorted(e for e in events if e.startswith("compile:"))
    # Versions were compiling before the first solve returned.
    assert events[0].startswith("compile:") and events.index("solved") > 1, events[:3]
    events.clear()
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    alone = cli(*ARGS)
    assert alone.code == 0, alone.err[-2000:]
    assert events[0] == "solved"  # one core: every version compiles after the solve, as before
    assert side.out == alone.out
    # As many programs compiled, each once, either way (the texts of a second trace in one process may
    # differ in names).
    compiles_alone = [e for e in events if e.startswith("compile:")]
    assert len(compiles_side) == len(compiles_alone) == len(set(compiles_alone)) == len(set(compiles_side))
