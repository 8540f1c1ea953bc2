"""The tool compiles CPU programs to read them, never to run them, so it skips LLVM's optimisation of the
machine code (``optimize_machine_code=False``: ``xla_backend_optimization_level=0``, analyzer/adapter/
compiling.py). The figures it reads must be the ones a user's own ``lowered.compile()`` gives: the compiled
text and ``memory_analysis()`` of XLA's defaults, and the buffer-assignment and live-range reports XLA writes
at its defaults, compiled here in a child process whose XLA_FLAGS hold nothing but the device count (this
suite's own XLA_FLAGS turn the optimisation off for its oracles too, tests/conftest.py, so an in-process
comparison would compare -O0 with -O0)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

_CHILD = r"""
import hashlib, importlib, json, sys
import jax
jax.config.update("jax_platforms", "cpu")
sys.path.insert(0, "examples")
from jax_shard_lint.analyzer.adapter.compiling import compile_lowered, compile_stablehlo_text
from jax_shard_lint.analyzer.adapter.jax_adapter import device_assignment, stablehlo_text

def figures(compiled):
    m = compiled.memory_analysis()
    return [hashlib.sha256(compiled.as_text().encode()).hexdigest(), m.temp_size_in_bytes,
            m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes]

def reports(program):
    return [hashlib.sha256(program.buffer_assignment_text.encode()).hexdigest(),
            hashlib.sha256(program.live_range_text.encode()).hexdigest()]

out = {}
for name in sys.argv[1:]:
    for target, lowered in importlib.import_module(name).shard_lint_targets().items():
        read_only = compile_lowered(lowered, optimize_machine_code=False)
        text_compile = compile_stablehlo_text(stablehlo_text(lowered), len(device_assignment(lowered)),
                                              devices=list(device_assignment(lowered)), with_reports=False,
                                              optimize_machine_code=False)
        out[f"{name}:{target}"] = {
            "xla_defaults": figures(lowered.compile()),
            "tool": figures(compile_lowered(lowered, with_reports=False, optimize_machine_code=False).compiled),
            "tool_with_reports": figures(read_only.compiled),
            "reports_at_defaults": reports(compile_lowered(lowered)),
            "reports_read_only": reports(read_only),
            "text_compile_memory": [text_compile.memory[k] for k in ("temp_bytes", "argument_bytes",
                                                                     "output_bytes", "alias_bytes")],
        }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled_both_ways():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    done = subprocess.run([sys.executable, "-c", _CHILD, "fsdp_tp_train_step", "remat_layer_stack",
                           "value_function_step", "lcm_grid_search_kernel"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_tools_cpu_compile_reads_what_xlas_defaults_compile(compiled_both_ways):
    assert len(compiled_both_ways) >= 4
    for name, ways in compiled_both_ways.items():
        assert ways["tool"] == ways["xla_defaults"], name
        assert ways["tool_with_reports"] == ways["xla_defaults"], name
        assert ways["reports_read_only"] == ways["reports_at_defaults"], name
        assert ways["text_compile_memory"] == ways["xla_defaults"][1:], name


def test_the_suites_oracles_compile_as_the_tool_does():
    assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"].split()
