"""gate on a change of size alone (a capacity, a grid): the baseline's collectives come back resized at
their lines, as the same collectives grown, not as new ones beside gone ones (moe14 F6, cfd14 F7b)."""

import json
import math
import os
import re
import textwrap

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

SCRIPT = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


    def step(x):
        return jnp.cumsum(x, axis=0) * 2


    def shard_lint_targets(cols=1024):
        m = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        x = jax.ShapeDtypeStruct((4096, cols), jnp.float32, sharding=NamedSharding(m, P("data", None)))
        return {"step": jax.jit(step, out_shardings=x.sharding).lower(x)}
    ''')


def _xla_all_gathers(cols):
    """The compiled program's all-gathers: (result shape, bytes) from XLA's text."""
    m = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((4096, cols), jnp.float32, sharding=NamedSharding(m, P("data", None)))
    text = jax.jit(lambda a: jnp.cumsum(a, axis=0) * 2, out_shardings=x.sharding).lower(x).compile().as_text()
    shapes = re.findall(r"= f32\[([\d,]+)\][^ ]* all-gather\(", text)
    return [[int(d) for d in s.split(",")] for s in shapes]


def test_a_grown_all_gather_is_the_baselines_resized_not_new(cli, tmp_path):
    script = tmp_path / "resized_step.py"
    script.write_text(SCRIPT)
    snap = tmp_path / "snap"
    assert cli("snapshot", str(script), "-o", str(snap)).code == 0
    result = cli("gate", str(script), "--baseline", str(snap), "--set", "cols=1280", "--format", "json")
    rows = json.loads(result.out)["rows"]
    (before_shape,), (after_shape,) = _xla_all_gathers(1024), _xla_all_gathers(1280)
    assert before_shape != after_shape
    assert not [r for r in rows if r["metric"].startswith("new ")], rows
    grown = [r for r in rows if " grew from " in r["metric"]]
    assert len(grown) == 1, rows
    assert grown[0]["metric"].endswith(f"at {script}:7 grew from f32{before_shape} to f32{after_shape}"), grown
    assert grown[0]["alert"] is None
    # Bytes per step: the gathered result's, 4 bytes an element.
    assert (grown[0]["before"], grown[0]["after"]) == (math.prod(before_shape) * 4, math.prod(after_shape) * 4)
    # The collective bytes grew 25%: that row, not a "new" one, fails the gate.
    flagged = [r["metric"] for r in rows if r["alert"]]
    assert "collective bytes / step" in flagged and result.code == 1


def test_a_script_gated_on_one_target_is_compared_on_that_target(cli, tmp_path):
    """--target with the script was ignored (every target linted and compared); now the gate lints the named
    target and compares it alone: the others are not reported missing."""
    script = os.path.join("examples", "value_function_step.py")
    snap = tmp_path / "snap"
    assert cli("snapshot", script, "-o", str(snap)).code == 0
    result = cli("gate", script, "--baseline", str(snap), "--target", "sharded_on_grid", "--format", "json")
    assert result.code == 0, result.out + result.err
    assert {r["target"] for r in json.loads(result.out)["rows"]} == {"sharded_on_grid"}
    result = cli("gate", script, "--baseline", str(snap), "--target", "sharded_on_grid", "--update")
    assert result.code == 2 and "--target: --update rewrites the whole baseline" in result.err
