"""MaxText itself (the [maxtext] extra, Python >= 3.12, in an environment of its own), a small llama-style
config with fsdp=8, as a MaxText user lints it: through the wrapper examples/models/maxtext_train_step.py
(MaxText's own train_compile functions) and with ``run`` on train_compile, unmodified.

The oracles are MaxText's and XLA's, each in a process of its own:
- TPU v5e-8: ``python -m maxtext.trainers.pre_train.train_compile`` with ``compile_topology=v5e-8``, its
  printed ``memory_analysis()`` and the compiled HLO XLA dumps (collectives counted once per channel: TPU
  splits a gather into pieces of one channel);
- 8 CPU devices: the wrapper's lowered step compiled by XLA, its ``memory_analysis()`` and HLO text.

Skipped where MaxText is not installed (CI's environments); run with
``pip install -e ".[maxtext]" pytest`` then ``pytest tests/real_models/test_maxtext.py``.
"""

import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

if importlib.util.find_spec("maxtext") is None:
    pytest.skip("the [maxtext] extra (MaxText, Python >= 3.12) is not installed", allow_module_level=True)

from conftest import ROOT, console_script  # noqa: E402

WRAPPER = os.path.join(ROOT, "examples", "models", "maxtext_train_step.py")
sys.path.insert(0, os.path.dirname(WRAPPER))
import maxtext_train_step  # noqa: E402

sys.path.pop(0)

TIMEOUT = 900
_COLLECTIVE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) (all-gather|all-reduce|reduce-scatter|all-to-all|"
                         r"collective-permute)(-start)?\(.*?channel_id=(\d+)", re.M)
_ARRAY = re.compile(r"\b(f32|bf16|s32|u32|f16|s8|u8|pred|s64|f64)\[([\d,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "f64": 8}
_STATS = re.compile(r"(\w+_size_in_bytes)=(\d+)")


def _size(dtype, dims):
    size = _BYTES[dtype]
    for d in filter(None, dims.split(",")):
        size *= int(d)
    return size


def _bytes(shape_text, kind, start):
    """Bytes of a collective's result: a tuple's elements summed (a combined all-reduce), except an async
    start's (operand, result, context...) tuple, whose result is the second element."""
    arrays = _ARRAY.findall(shape_text)
    if start and kind in ("all-gather", "collective-permute"):
        return _size(*arrays[1])
    return sum(_size(*a) for a in arrays)


def channels(hlo):
    """channel id -> (kind, per-device bytes) of its first piece, from the compiled HLO text."""
    out = {}
    for _, shape, kind, start, channel in _COLLECTIVE.findall(hlo):
        out.setdefault(channel, (kind, _bytes(shape, kind, start)))
    return out


def _peak(stats):
    return (stats["temp_size_in_bytes"] + stats["argument_size_in_bytes"] + stats["output_size_in_bytes"]
            - stats["alias_size_in_bytes"])


def _tool(command, *args, cwd):
    result = subprocess.run([console_script(), command, "--format", "json", "-q", "--fail-on", "never", *args],
                            capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT,
                            env={**os.environ, "COLUMNS": "130"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["targets"]


@pytest.fixture(scope="module")
def train_compile_v5e(tmp_path_factory):
    """MaxText's train_compile for a v5e-8 slice: its memory_analysis() and the compiled HLO."""
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip("compiling for a TPU slice needs libtpu (the [tpu] extra)")
    dump = tmp_path_factory.mktemp("train_compile")
    argv = [sys.executable, "-m", "maxtext.trainers.pre_train.train_compile", maxtext_train_step.base_config(),
            "compile_topology=v5e-8", "compile_topology_num_slices=1", *maxtext_train_step.config_argv(),
            f"base_output_directory={dump}"]
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump / 'xla'}", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, cwd=dump, env=env, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("Memory analysis:")]
    [hlo] = glob.glob(str(dump / "xla" / "*jit_train_step*after_optimizations.txt"))
    return {k: int(v) for k, v in _STATS.findall(line)}, open(hlo).read(), argv[3:], dump


def _assert_collectives_are_the_compiled_ones(target, hlo):
    compiled = channels(hlo)
    assert len(target["collectives"]) == len(compiled)
    assert sorted((c["kind"], c["bytes"]) for c in target["collectives"]) == sorted(compiled.values())


def _assert_fsdp_traffic_is_intended(target):
    """The scanned layers' weights are (embed, layers, ...): their gathers and gradient reductions are FSDP's,
    and SL102 (collective in a loop) says nothing about them."""
    in_loop = [c for c in target["collectives"] if c["count"] > 1]
    assert in_loop and {c["intent"] for c in in_loop} <= {"parameter-gather", "gradient-reduction"}
    assert not [f for f in target["findings"] if f["rule"] == "SL102"]


def test_lint_on_tpu_gives_train_compiles_figures(train_compile_v5e, tmp_path):
    stats, hlo, _, _ = train_compile_v5e
    assert 'custom_call_target="tpu_custom_call"' in hlo  # the default attention: the Pallas splash kernel
    [t] = _tool("lint", WRAPPER, "--platform", "tpu-v5e", "--devices", "8", cwd=tmp_path)
    assert t["platform"].startswith("tpu-v5e (compiled for 8 x TPU-V5E, topology v5e:2x4")
    m = t["memory"]
    assert (m["argument_bytes"], m["output_bytes"], m["alias_bytes"], m["temp_bytes"]) == (
        stats["argument_size_in_bytes"], stats["output_size_in_bytes"], stats["alias_size_in_bytes"],
        stats["temp_size_in_bytes"])
    assert m["peak_bytes"] == _peak(stats)
    _assert_collectives_are_the_compiled_ones(t, hlo)
    _assert_fsdp_traffic_is_intended(t)
    assert not os.listdir(tmp_path)  # the wrapper writes nothing where it runs


def test_run_on_train_compile_unmodified(train_compile_v5e, tmp_path):
    """``jax-shard-lint run`` on MaxText's train_compile with its own arguments: the train step is reported
    as compiled for the v5e, with train_compile's memory (the dump alone is below it by the compiler's
    scratch area) and its collectives, at MaxText's lines (library frames: ``via``)."""
    stats, hlo, args, _ = train_compile_v5e
    script = importlib.util.find_spec("maxtext.trainers.pre_train.train_compile").origin
    targets = _tool("run", script, "--", *args, f"base_output_directory={tmp_path}", cwd=tmp_path)
    [t] = [t for t in targets if t["name"] == "jit_train_step"]
    assert t["platform"] == "as run (tpu-v5e)" and t["num_devices"] == 8
    assert t["memory"]["peak_bytes"] == _peak(stats)
    assert not [w for w in t["warnings"] if "not reported as findings" not in w]  # SL105's count of small reshards
    _assert_collectives_are_the_compiled_ones(t, hlo)
    assert all(c["via"] and not c["source"] for c in t["collectives"])  # no line of it is the user's


DEFAULT_SIZE = {"layers": 16, "emb": 2048, "heads": 16, "head_dim": 128, "mlp": 7168, "vocab": 32000, "seq": 2048,
                "batch_per_device": 12}  # base.yml's model


def test_default_size_on_tpu_collective_matmuls_are_fsdp_traffic(tmp_path):
    """At MaxText's default model size the TPU compiler turns the FSDP gathers and the gradients'
    reduce-scatters into collective matmuls: 80 collective-permutes, all 'reshard' before, and SL102 fired
    on them ('79x collective-permute ... 4.7 GiB per step'). Against train_compile: memory, and every
    collective per channel; every permute is FSDP's, SL102 is quiet."""
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip("compiling for a TPU slice needs libtpu (the [tpu] extra)")
    keys = maxtext_train_step.config_argv(**DEFAULT_SIZE)
    argv = [sys.executable, "-m", "maxtext.trainers.pre_train.train_compile", maxtext_train_step.base_config(),
            "compile_topology=v5e-8", "compile_topology_num_slices=1", *keys, f"base_output_directory={tmp_path}"]
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path / 'xla'}", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    oracle = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    [line] = [ln for ln in oracle.stdout.splitlines() if ln.startswith("Memory analysis:")]
    stats = {k: int(v) for k, v in _STATS.findall(line)}
    [hlo] = glob.glob(str(tmp_path / "xla" / "*jit_train_step*after_optimizations.txt"))
    hlo = open(hlo).read()
    sets = [x for k, v in DEFAULT_SIZE.items() for x in ("--set", f"{k}={v}")]
    [t] = _tool("lint", WRAPPER, "--platform", "tpu-v5e", "--devices", "8", *sets, cwd=tmp_path)
    assert t["memory"]["temp_bytes"] == stats["temp_size_in_bytes"]
    assert t["memory"]["peak_bytes"] == _peak(stats)
    _assert_collectives_are_the_compiled_ones(t, hlo)
    permutes = [c for c in t["collectives"] if c["kind"] == "collective-permute"]
    assert permutes and {c["intent"] for c in permutes} == {"parameter-gather", "gradient-reduction"}
    assert not [f for f in t["findings"] if f["rule"] == "SL102"]


_CPU_ORACLE = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
sys.path.insert(0, sys.argv[1])
import maxtext_train_step
compiled = maxtext_train_step.shard_lint_targets(mesh_devices=jax.devices())["train_step"].compile()
m = compiled.memory_analysis()
print(json.dumps({"stats": {k: getattr(m, k) for k in dir(m) if k.endswith("_size_in_bytes")},
                  "hlo": compiled.as_text()}))
"""


def test_lint_on_cpu_devices_gives_xlas_figures(tmp_path):
    oracle = subprocess.run([sys.executable, "-c", _CPU_ORACLE, os.path.dirname(WRAPPER)], capture_output=True,
                            text=True, cwd=tmp_path, timeout=TIMEOUT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    xla = json.loads(oracle.stdout.splitlines()[-1])
    [t] = _tool("lint", WRAPPER, "--devices", "8", cwd=tmp_path)
    assert t["memory"]["peak_bytes"] == _peak(xla["stats"])
    assert t["memory"]["temp_bytes"] == xla["stats"]["temp_size_in_bytes"]
    _assert_collectives_are_the_compiled_ones(t, xla["hlo"])
    _assert_fsdp_traffic_is_intended(t)


def test_suggest_on_maxtexts_step(tmp_path):
    """suggest on MaxText's whole train state: NNX parameters, optax moments and nnx.Rngs keys (typed keys,
    one dimension more in the module than in the state: binding them raised ValueError, exit 3). The text
    is checked before it is shown: pasted into jax.jit and compiled by XLA."""
    result = subprocess.run([console_script(), "suggest", WRAPPER, "--devices", "8", "--format", "json", "-q"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    [s] = json.loads(result.stdout)["targets"]
    assert s["text_problem"] is None and s["in_shardings_text"].startswith("in_shardings=")
    assert any("['rngs']" in a["path"] and "key" in a["path"] for a in s["arguments"])
