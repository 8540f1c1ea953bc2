"""fit over several targets: the answer and the next value name the target whose peak they are (moe14 F7,
cfd14 F8), checked against XLA's memory_analysis() of each target compiled here."""

import json
import textwrap

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

SCRIPT = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


    def light(x):
        return x * 2


    def heavy(x):
        return jnp.concatenate([jnp.sin(x), jnp.cos(x), jnp.exp(x)], axis=1).sum(axis=1)


    def shard_lint_targets(batch=64):
        m = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        x = jax.ShapeDtypeStruct((batch, 4096), jnp.float32, sharding=NamedSharding(m, P("data", None)))
        return {"light": jax.jit(light).lower(x), "heavy": jax.jit(heavy).lower(x)}
    ''')


def _xla_peaks(batch):
    m = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    x = jax.ShapeDtypeStruct((batch, 4096), jnp.float32, sharding=NamedSharding(m, P("data", None)))
    peaks = {}
    for name, fn in (("light", lambda a: a * 2),
                     ("heavy", lambda a: jnp.concatenate([jnp.sin(a), jnp.cos(a), jnp.exp(a)], axis=1).sum(axis=1))):
        mem = jax.jit(fn).lower(x).compile().memory_analysis()
        peaks[name] = (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
                       - mem.alias_size_in_bytes)
    return peaks


def test_fit_names_the_target_that_binds(cli, tmp_path):
    script = tmp_path / "two_targets.py"
    script.write_text(SCRIPT)
    args = ("fit", str(script), "--param", "batch", "--budget", "1MiB", "--multiple-of", "8", "--range", "8:512")
    answer = json.loads(cli(*args, "--format", "json").out)
    value, nxt = answer["value"], answer["next_value"]
    assert value is not None and nxt is not None, answer
    at_value, at_next = _xla_peaks(value), _xla_peaks(nxt)
    binding = max(at_next, key=at_next.get)
    assert at_next[binding] > 2**20 >= max(at_value.values())
    by_value = {p["value"]: p for p in answer["probes"]}
    assert by_value[nxt]["target"] == binding and by_value[nxt]["peak_bytes"] == at_next[binding]
    assert by_value[value]["target"] == max(at_value, key=at_value.get)
    text = cli(*args).out
    line = " ".join(text.split())
    assert f"batch={nxt} needs {at_next[binding] / 2**20:,.3f} MiB" in line, text  # a 1 MiB budget: three decimals
    assert f"({binding}, the target that binds)" in line and "KiB" not in text and "GiB" not in text
