"""rewrite --validate over outputs that hold NaN or Inf: NaN == NaN is no match of values, so the verdict
says how many outputs hold NaN or Inf in both versions (a ViT's seeded step: 72 outputs, half NaN, read
"outputs match yes"), and the JSON carries the count."""

import json

import numpy as np

NONFINITE = """
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def logs(w, x):
    return jnp.log(x @ w), jnp.exp(1000.0 * w), w * 2.0  # log of a negative: NaN; exp of 1000 w > 0: Inf


def finite(w, x):
    return jnp.tanh(x @ w), w * 2.0


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    s = lambda shape, p: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, p))
    args = (s((64, 128), P("data", "model")), s((32, 64), P("data")))
    return {"logs": jax.jit(logs).lower(*args), "finite": jax.jit(finite).lower(*args)}
"""


def _seeded():
    """The arguments rewrite --validate draws (standard normal, seed 0, in argument order), drawn here."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32))


def test_outputs_nan_or_inf_in_both_versions_are_counted_not_matched(cli, tmp_path):
    script = tmp_path / "nonfinite.py"
    script.write_text(NONFINITE)
    result = cli("rewrite", str(script), "--validate", "--repeats", "1", "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    by_name = {t["name"]: t["validation"] for t in json.loads(result.out)["targets"]}
    logs, finite = by_name["logs"], by_name["finite"]

    w, x = _seeded()
    with np.errstate(all="ignore"):
        nan = int(np.isnan(np.log(x @ w)).sum())
        inf = int(np.isinf(np.exp(np.float32(1000.0) * w)).sum())
    assert 0 < nan < 32 * 128 and 0 < inf < 64 * 128
    assert logs["ran"] and logs["outputs_match"] and logs["mismatches"] == []
    assert logs["outputs_not_finite"] == 2
    assert logs["nan_values"] == [f"result[0]: {nan:,} NaN of 4,096 values in both versions",
                                  f"result[1]: {inf:,} Inf of 8,192 values in both versions"]
    assert finite["outputs_match"] and finite["outputs_not_finite"] == 0 and finite["nan_values"] == []

    shown = cli("rewrite", str(script), "--validate", "--repeats", "1", "--target", "logs", "-q")
    assert shown.code == 0, shown.err[-2000:]
    text = " ".join(shown.out.split())
    assert ("outputs match yes, but 2 outputs are NaN or Inf in both versions (seeded inputs: give "
            "shard_lint_inputs for real ones)") in text, text
    assert f"not compared, in both versions: result[0]: {nan:,} NaN of 4,096 values" in text
    finite_text = " ".join(cli("rewrite", str(script), "--validate", "--repeats", "1", "--target", "finite",
                               "-q").out.split())
    assert "outputs match yes, shardings as declared" in finite_text, finite_text
