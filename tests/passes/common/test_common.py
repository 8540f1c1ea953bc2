"""The shared pieces of passes/common against JAX and XLA: byte sizes against
XLA's ``memory_analysis()``, ``P(...)`` text against JAX's PartitionSpec, pytree
paths against ``jax.tree_util``'s own key paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

from jax_shard_lint.passes.common.byte_sizes import format_bytes, parse_bytes
from jax_shard_lint.passes.common.durations import format_seconds
from jax_shard_lint.passes.common.pytree_paths import argument_name, path_keys
from jax_shard_lint.passes.common.shapes import array_bytes, parse_arrays, shape_bytes
from jax_shard_lint.passes.common.sharding_text import normalized, out_shardings_text, pspec_text

DTYPES = ["float32", "bfloat16", "float16", "float64", "int8", "uint8", "int32", "int64", "bool", "complex64",
          "float8_e4m3fn", "int4", "uint4"]


def _compiled_argument(dtype: str, shape: tuple[int, ...]):
    return jax.jit(lambda x: x).lower(jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))).compile()


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_arrays_bytes_are_xlas_argument_bytes(dtype):
    # The HLO type name comes from XLA's own text of the parameter; its size from memory_analysis().
    shape = (3, 40)
    compiled = _compiled_argument(dtype, shape)
    hlo_type = next(line for line in compiled.as_text().splitlines() if "parameter(0)" in line)
    (array,) = parse_arrays(hlo_type.split("=", 1)[1].split("parameter")[0])
    assert array.dims == shape
    assert array_bytes(array.dtype, array.dims) == compiled.memory_analysis().argument_size_in_bytes


def test_a_tuples_bytes_are_its_elements():
    compiled = jax.jit(lambda x, y: (x * 2, y + 1, x.sum())).lower(
        jax.ShapeDtypeStruct((16, 8), jnp.float32), jax.ShapeDtypeStruct((5,), jnp.int8)).compile()
    root = next(line for line in compiled.as_text().splitlines() if line.strip().startswith("ROOT")
                and "tuple(" in line)
    text = root.split("=", 1)[1].split("tuple(")[0].strip()
    assert shape_bytes(text) == 16 * 8 * 4 + 5 + 4
    assert [a.dtype for a in parse_arrays(text)] == ["f32", "s8", "f32"]


@pytest.mark.parametrize("sharding", [
    [["data"], []], [[], ["model"]], [["data", "model"], []], [[], [], []], [["x"], ["y"], ["z"]], [],
])
def test_pspec_text_is_the_partition_spec_jax_builds(sharding):
    text = pspec_text(sharding)
    trailing = list(sharding)
    while trailing and not trailing[-1]:
        trailing.pop()
    expected = PartitionSpec(*[None if not a else a[0] if len(a) == 1 else tuple(a) for a in trailing])
    assert eval(text, {"P": PartitionSpec}) == expected  # noqa: S307 (our own text, built above)
    assert normalized(sharding, 3) == tuple(tuple(a) for a in (list(sharding) + [[]] * 3)[:3])


def test_out_shardings_text_rebuilds_the_output_tree():
    paths = ["result[0]['w']", "result[0]['b']", "result[1]"]
    text = out_shardings_text(paths, [[["data"], []], [[]], []])
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    assert text.startswith("out_shardings=")
    names = {"P": PartitionSpec, "NamedSharding": jax.sharding.NamedSharding, "mesh": mesh}
    tree = eval(text.removeprefix("out_shardings="), names)  # noqa: S307
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))[0]
    got = {jax.tree_util.keystr(p): s.spec for p, s in leaves}
    assert got == {"[0]['b']": PartitionSpec(), "[0]['w']": PartitionSpec("data"), "[1]": PartitionSpec()}


def test_path_keys_are_jaxs_key_paths():
    class State:
        pass

    state = {"w": [1.0, 2.0], "opt": {"mu": (3.0,), "it's": 4.0}}
    for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]:
        keys = tuple(getattr(k, "key", getattr(k, "idx", getattr(k, "name", None))) for k in path)
        assert path_keys("state" + jax.tree_util.keystr(path)) == ("state", keys)
    assert path_keys("args[2].params['w']") == ("args", (2, "params", "w"))


def test_argument_name_is_the_jit_argument_of_any_leaf():
    """An Equinox module's leaves are attributes (``params.embed.weight``): their argument is ``params``, as
    for a dict's (SL202 names it, and its fix check donates every array of it)."""
    assert argument_name("params.embed.weight") == argument_name("params['w']") == "params"
    assert argument_name("opt_state[0].mu.blocks[1].fc1.weight") == "opt_state"
    assert argument_name("args[1][0]") == "args[1]"


@pytest.mark.parametrize(("text", "expected"), [
    ("80GiB", 80 * 1024**3), ("1.5 TB", 1_500_000_000_000), ("512MiB", 512 * 1024**2), ("1048576", 1048576),
    (4096, 4096), ("16 kib", 16384),
])
def test_sizes_people_write(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["80 GiBs", "-1", "lots", "1e9", -5, ""])
def test_sizes_that_are_not(bad):
    with pytest.raises(ValueError):
        parse_bytes(bad)


@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 1536, 80 * 1024**3 + 12345, 3 * 1024**4])
def test_formatted_bytes_read_back_within_their_rounding(n):
    text = format_bytes(n)
    assert abs(parse_bytes(text.replace(",", "").replace(" B", "")) - n) <= 0.05 * n + 1
    assert format_bytes(-n) == (text if n == 0 else "-" + text)


def test_durations_keep_three_significant_digits():
    assert [format_seconds(s) for s in (None, 2.5e-6, 7.21e-3, 1.248, 1248.0)] == \
        ["-", "2.5 us", "7.21 ms", "1.25 s", "1,248 s"]
