"""Meshes other than the suite's 8 devices: 16 and 64 virtual devices, and a mesh over a subset
of the devices the tool gives a script. The installed console script lints them; the oracle is XLA
itself, compiling the same target in a separate Python with that many CPU devices: its
memory_analysis() and the collectives in its compiled text (each instruction and its kind)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

FSDP = os.path.join(ROOT, "examples", "fsdp_tp_train_step.py")
SMALL = {"batch": 64, "seq": 64, "d_model": 256, "d_ff": 512, "layers": 2, "vocab": 1024}

ORACLE = textwrap.dedent('''
    import importlib.util, json, re, sys
    import jax
    jax.config.update("jax_num_cpu_devices", int(sys.argv[2]))
    spec = importlib.util.spec_from_file_location("target", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lowered = next(iter(module.shard_lint_targets(**json.loads(sys.argv[3])).values()))
    compiled = lowered.compile()
    m = compiled.memory_analysis()
    found = re.findall(r"^\\s*(?:ROOT )?%\\S+ = .*? (all-gather|all-reduce|reduce-scatter|all-to-all|"
                       r"collective-permute)(?:-start)?\\(", compiled.as_text(), re.M)
    print(json.dumps({"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
                      "temp": m.temp_size_in_bytes, "alias": m.alias_size_in_bytes,
                      "collectives": sorted(found)}))
''')


def _xla(script: str, devices: int, params: dict) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", ORACLE, script, str(devices), json.dumps(params)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _lint(script: str, devices: int, params: dict) -> dict:
    exe = shutil.which("jax-shard-lint")
    assert exe, "the console script is not installed"
    sets = [a for k, v in params.items() for a in ("--set", f"{k}={v}")]
    out = subprocess.run([exe, "lint", script, "--devices", str(devices), "--format", "json", "-q", "--no-cache",
                          "--fail-on", "never", *sets], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    [target] = json.loads(out.stdout)["targets"]
    return target


def _agree(target: dict, xla: dict) -> None:
    m = target["memory"]
    assert (m["argument_bytes"], m["output_bytes"], m["temp_bytes"], m["alias_bytes"]) == (
        xla["argument"], xla["output"], xla["temp"], xla["alias"])
    assert m["peak_bytes"] == xla["argument"] + xla["output"] + xla["temp"] - xla["alias"]
    ours = sorted(kind for c in target["collectives"] for kind in [c["kind"]] * (1 + len(c["pieces"])))
    assert ours == xla["collectives"]


@pytest.mark.parametrize("devices", [16, 64])
def test_larger_meshes_match_xla(devices):
    target = _lint(FSDP, devices, SMALL)
    assert target["num_devices"] == devices
    assert dict(target["mesh"]) == {"fsdp": devices // 2, "tp": 2}
    _agree(target, _xla(FSDP, devices, SMALL))
    # Every collective spans axes (or sub-axes, "fsdp:(2)4") of this mesh, at the user's line.
    for c in target["collectives"]:
        assert c["mesh_axes"] and {a.split(":")[0] for a in c["mesh_axes"]} <= {"fsdp", "tp"}, c
        assert c["source"] is None or c["source"]["file"] == "examples/fsdp_tp_train_step.py", c


SUBSET = '''import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def step(w, x):
    return jnp.tanh(x @ w).sum(0)


def shard_lint_targets(mesh_devices=None):
    devices = (mesh_devices if mesh_devices is not None else jax.devices())[:4]  # half of them
    mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)
    s = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
    return {"step": jax.jit(step).lower(s((256, 512), P(None, "model")), s((64, 256), P("data")))}
'''


def test_a_mesh_over_a_subset_of_the_devices_matches_xla(tmp_path):
    script = tmp_path / "subset_mesh.py"
    script.write_text(SUBSET)
    target = _lint(str(script), 8, {})
    assert dict(target["mesh"]) == {"data": 2, "model": 2} and target["num_devices"] == 4
    _agree(target, _xla(str(script), 8, {}))
    assert {tuple(c["mesh_axes"]) for c in target["collectives"]} == {("data",)}  # the batch sum
