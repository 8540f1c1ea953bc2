"""The per-op cost model (passes/hlo/cost.py) against figures read from XLA in the
test: a top-level dot's FLOPs (and XLA's cost_analysis) and a cuBLAS GEMM custom
call's against 2 x the result's elements x the contracted size in the compiled
text, and an in-place dynamic-update-slice fusion's bytes against its operands'
and update's sizes in the text."""

import re
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from ci_deps import needs
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.hlo.cost import program_cost
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

_BYTES = {"f32": 4, "s32": 4, "bf16": 2, "f16": 2, "u8": 1, "s8": 1}
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def _line(text: str, pattern: str) -> str:
    found = [ln for ln in text.splitlines() if re.search(pattern, ln)]
    assert len(found) == 1, (pattern, found)
    return found[0]


def _name(line: str) -> str:
    return re.match(r"\s*(?:ROOT )?%?([\w.\-$]+) = ", line).group(1)


def _dims(array_text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in array_text.split(",") if d)


def _shape_of(text: str, name: str) -> tuple[str, tuple[int, ...]]:
    """The dtype and dims of the instruction (or parameter) ``name`` as XLA printed it."""
    line = _line(text, rf"^\s*(?:ROOT )?%?{re.escape(name)} = ")
    dtype, dims = _ARRAY.search(line.split(" = ", 1)[1]).groups()
    return dtype, _dims(dims)


def _bytes(text: str, name: str) -> int:
    dtype, dims = _shape_of(text, name)
    return _BYTES[dtype] * prod(dims)


def _op(cost, name):
    [op] = [o for o in cost.ops if o.name == name]
    return op


def test_a_top_level_batched_dot_counts_batch_times_rows_times_columns_times_contracted():
    # s32 stays a top-level dot on CPU (f32 goes to a library fusion): the dot branch of the cost itself.
    a = jax.ShapeDtypeStruct((4, 8, 16), jnp.int32)
    b = jax.ShapeDtypeStruct((4, 16, 2), jnp.int32)
    compiled = jax.jit(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b)).lower(a, b).compile()
    text = compiled.as_text()
    line = _line(text, r" dot\(")
    lhs_name = re.search(r" dot\(%?([\w.\-]+),", line).group(1)
    _, out = _shape_of(text, _name(line))
    _, lhs = _shape_of(text, lhs_name)
    contracted = prod(lhs[int(d)] for d in re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line).group(1).split(","))
    expected = 2 * prod(out) * contracted  # 2 x (4 x 8 x 2) x 16
    op = _op(program_cost(parse_hlo_module(text)), _name(line))
    assert op.flops == expected == compiled.cost_analysis()["flops"]


@needs("jax_plugins.xla_cuda12", "the [gpu] extra is not installed")
def test_a_cublas_gemm_custom_call_counts_its_dot_dimensions():
    from jax_shard_lint.analyzer.platforms.gpu_targets import load_target, target_devices

    mesh = Mesh(np.array(target_devices(load_target("h100"), 8, 1)), ("x",), axis_types=(AxisType.Auto,))
    replicated = NamedSharding(mesh, P())
    a = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=replicated)
    b = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=replicated)
    # Without Triton GEMMs XLA calls cuBLAS: a custom call with two operands and its dims in the config.
    compiled = jax.jit(lambda a, b: a @ b).lower(a, b).compile({"xla_gpu_enable_triton_gemm": False})
    text = compiled.as_text()
    line = _line(text, r'custom_call_target="__cublas\$(lt\$matmul|gemm)"')
    operands = re.search(r"custom-call\(([^)]*)\)", line).group(1)
    lhs_name = re.findall(r"%([\w.\-]+)", operands)[0]
    _, lhs = _shape_of(text, lhs_name)
    contracted = prod(lhs[int(d)] for d in re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', line)
                      .group(1).replace('"', "").split(","))
    out = _dims(_ARRAY.search(line.split(" = ", 1)[1]).group(2))  # the first array of its result (tuple)
    expected = 2 * prod(out) * contracted  # 2 x (256 x 64) x 128
    op = _op(program_cost(parse_hlo_module(text)), _name(line))
    assert expected == 2 * 256 * 64 * 128  # the text's shapes are the program's (compile-only: no cost_analysis)
    assert op.flops == expected


def test_an_in_place_update_fusion_reads_its_update_not_the_buffer():
    buf = jax.ShapeDtypeStruct((64, 32), jnp.float32)
    upd = jax.ShapeDtypeStruct((4, 32), jnp.float32)
    i = jax.ShapeDtypeStruct((), jnp.int32)
    compiled = jax.jit(lambda buf, u, i: jax.lax.dynamic_update_slice(buf, jnp.sin(u), (i, 0)),
                       donate_argnums=0).lower(buf, upd, i).compile()
    text = compiled.as_text()
    root = _line(text, r"ROOT .*dynamic-update-slice\(")  # the fused computation's root updates a parameter
    target, update = re.search(r"dynamic-update-slice\(%?([\w.\-]+), %?([\w.\-]+)", root).groups()
    index = int(re.search(r"parameter\((\d+)\)", _line(text, rf"^\s*%?{re.escape(target)} = ")).group(1))
    fusion = _line(text, r" fusion\(")
    operands = re.findall(r"%?([\w.\-]+)", re.search(r" fusion\(([^)]*)\)", fusion).group(1))
    # The update's bytes written, plus every operand but the buffer it updates in place (read: nothing).
    expected = _bytes(text, update) + sum(_bytes(text, o) for k, o in enumerate(operands) if k != index)
    assert expected == 4 * 32 * 4 + 4 + 4 * 32 * 4  # written update, the index, the read u
    assert _op(program_cost(parse_hlo_module(text)), _name(fusion)).bytes == expected
