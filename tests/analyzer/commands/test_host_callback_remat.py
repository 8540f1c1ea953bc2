"""SL104 on a host callback's result: XLA holds it on one device ({maximal device=0} up to JAX 0.10,
{single_device[device_id=0]} on 0.12) and rebuilds it whole on every device for its sharded reader. A newcomer's
diffrax step (equinox's error_if callbacks) was told "from P()" (0.10) or no layouts at all (0.12), with a fix to
"give the value's producer and its reader one layout", a callback inside equinox. The finding now says the value
is one device's and what to change; nothing is staged or compiled for it."""

import json
import os
import re
import subprocess
import sys

SCRIPT = '''import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def make_step(mesh):
    def step(x):
        y = jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct((32, 64), jnp.float32), x[:32])
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(None, "model")))
        return x * jnp.sum(y)
    return step


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    return {"step": jax.jit(make_step(mesh)).lower(x)}
'''


def _xla_warnings(path) -> str:
    """XLA's own stderr for the program, compiled in a fresh process (the partitioner's warnings)."""
    code = (f"import sys; sys.path.insert(0, {str(path.parent)!r}); import callback_step as m; "
            "m.shard_lint_targets()['step'].compile()")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          check=True).stderr


def test_a_host_callbacks_result_is_said_to_be_one_devices(cli, tmp_path):
    script = tmp_path / "callback_step.py"
    script.write_text(SCRIPT)
    xla = _xla_warnings(script)
    # XLA rebuilds the callback's result, held on device 0, for its P(None, 'model') reader.
    assert re.search(r"cannot go from sharding \{(maximal device=0|single_device\[device_id=0\])\} to", xla), xla
    result = cli("lint", str(script), "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    [finding] = [f for f in target["findings"] if f["rule"] == "SL104"]
    assert "to device 0 alone" in finding["message"] or "from device 0 alone to P(None, 'model')" in \
        finding["message"], finding["message"]
    assert "from P() " not in finding["message"]
    assert "one side is one device's value, as a host callback's operand or result is" in finding["message"]
    assert finding["fix"].startswith("no fix compiled: a host callback runs on one device")
    assert not finding.get("candidates") and finding.get("fix_check") is None
