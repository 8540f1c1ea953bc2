"""Byte sizes exactly (.ci/mutation's survivors on passes/common): every unit a size may be written
in, by its definition (SI powers of 1000, IEC powers of 1024), the formatted sizes at each unit's
boundary, and every element type's bytes against XLA's memory_analysis() of a parameter of it, with
the tuple elements XLA writes split where XLA's text splits them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_shard_lint.passes.common.byte_sizes import format_bytes, parse_bytes
from jax_shard_lint.passes.common.shapes import array_bytes, parse_arrays, shape_bytes, split_tuple

_UNITS = {"": 1, "b": 1, "B": 1,
          "k": 1000, "kb": 1000, "KB": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "GB": 1000**3,
          "t": 1000**4, "tb": 1000**4, "KiB": 1024, "mib": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


@pytest.mark.parametrize("unit", _UNITS)
def test_every_unit_is_its_definition(unit):
    assert parse_bytes(f"3{unit}") == 3 * _UNITS[unit]
    assert parse_bytes(f" 2.5 {unit} ") == int(2.5 * _UNITS[unit])


def test_byte_counts_at_their_limits():
    assert parse_bytes(0) == 0 and parse_bytes("0") == 0
    with pytest.raises(ValueError):
        parse_bytes(-1)
    assert parse_bytes("9" * 30) == int(float("9" * 30))  # 30 digits are read, with a unit after them too
    assert parse_bytes("9" * 30 + " B") == int(float("9" * 30))
    with pytest.raises(ValueError):
        parse_bytes("9" * 31)
    with pytest.raises(ValueError):  # a bool is not a byte count, though Python's bool is an int
        parse_bytes(True)
    with pytest.raises(ValueError) as bad:  # the message quotes the input's first 40 characters, no more
        parse_bytes("x" * 50)
    assert repr("x" * 40) in str(bad.value) and "x" * 41 not in str(bad.value)


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1,023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1024**2 - 1, "1,024.0 KiB"),
    (1024**2, "1.0 MiB"), (5 * 1024**2, "5.0 MiB"), (1024**3, "1.0 GiB"), (80 * 1024**3, "80.0 GiB"),
    (1024**4, "1.0 TiB"), (3 * 1024**4, "3.0 TiB"), (2048 * 1024**4, "2,048.0 TiB"),
])
def test_formatted_sizes_at_each_units_boundary(n, text):
    assert format_bytes(n) == text
    assert format_bytes(-n) == ("-" + text if n else text)


_ALL_DTYPES = ["bool", "int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32",
               "int64", "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
               "float4_e2m1fn", "float8_e3m4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3b11fnuz",
               "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]


@pytest.mark.parametrize("dtype", _ALL_DTYPES)
def test_every_element_types_bytes_are_xlas(dtype):
    # The HLO type name from XLA's text of the parameter, its size from memory_analysis(), at an odd
    # and an even element count.
    if not hasattr(jnp, dtype):
        pytest.skip(f"this JAX has no {dtype}")
    for shape in ((3, 40), (7,)):
        with jax.enable_x64(True):  # 64-bit types stay 64-bit (JAX makes them 32-bit by default)
            compiled = jax.jit(lambda x: x).lower(jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))).compile()
        hlo_type = next(line for line in compiled.as_text().splitlines() if "parameter(0)" in line)
        (array,) = parse_arrays(hlo_type.split("=", 1)[1].split("parameter")[0])
        assert array.dims == shape
        assert jnp.dtype(dtype).itemsize < 8 or array.dtype in ("s64", "u64", "f64", "c64", "c128")
        assert array_bytes(array.dtype, array.dims) == compiled.memory_analysis().argument_size_in_bytes, shape


def test_a_width_only_mlir_spells_is_the_one_in_its_name():
    from jax_shard_lint.passes.common.shapes import dtype_bits

    assert [dtype_bits(t) for t in ("i3", "ui7", "si24", "f6E3M2FN")] == [3, 7, 24, 6]


def test_a_tuple_splits_where_xla_writes_its_elements():
    compiled = jax.jit(lambda x, y: (x * 2, y + 1, x.sum())).lower(
        jax.ShapeDtypeStruct((16, 8), jnp.float32), jax.ShapeDtypeStruct((5,), jnp.int8)).compile()
    lines = compiled.as_text().splitlines()
    root = next(line for line in lines if line.strip().startswith("ROOT") and "tuple(" in line)
    text = root.split("=", 1)[1].split("tuple(")[0].strip()
    assert "{1,0}" in text  # a layout's comma, which is not the tuple's
    assert split_tuple(text) == text[1:-1].split(", ")  # XLA separates elements with ", "
    assert split_tuple("f32[16,8]{1,0}") == ["f32[16,8]{1,0}"]
    # An async start's nested tuple as libtpu writes it (tests/passes/hlo/test_hlo_parsing.py).
    start = "((f32[32768,1024]{1,0:T(8,128)}, s32[4096]{0:T(1024)}), f32[4096,1024]{1,0:T(8,128)}, u32[]{:S(8)})"
    assert [shape_bytes(p) for p in split_tuple(start)] == [32768 * 1024 * 4 + 4096 * 4, 4096 * 1024 * 4, 4]
