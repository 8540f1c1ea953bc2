"""The step-time estimate: collective formulas against hand-computed values, the
FLOP count and loop trip counts against XLA's own (cost_analysis, known_trip_count,
the TPU compiler's estimate), and the compute roofline of one large matmul."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ci_deps import needs
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_targets

from jax_shard_lint.analyzer.platforms.performance import device_spec, known_devices
from jax_shard_lint.passes.hlo.cost import program_cost
from jax_shard_lint.passes.hlo.loop_bounds import inferred_trip_count
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.step_time import collective_seconds
from jax_shard_lint.passes.models.device_spec import DeviceSpec

# One byte per second on both links and no latency: a collective's seconds are its ring bytes.
UNIT = DeviceSpec("unit", "unit links", (("f32", 1.0),), 1.0, 1.0, 0.5, 0.0, 0.0)
MiB = 1024**2


@pytest.mark.parametrize("kind, n, moved", [
    # Per device, B = 8 MiB of result: ring all-gather receives the n-1 other shards of B/n.
    ("all-gather", 2, 4 * MiB), ("all-gather", 4, 6 * MiB), ("all-gather", 8, 7 * MiB),
    # reduce-scatter: the input is n x B; each device sends n-1 shards of B.
    ("reduce-scatter", 2, 8 * MiB), ("reduce-scatter", 4, 24 * MiB), ("reduce-scatter", 8, 56 * MiB),
    # all-reduce = reduce-scatter + all-gather of B/n shards: 2 (n-1)/n x B.
    ("all-reduce", 2, 8 * MiB), ("all-reduce", 4, 12 * MiB), ("all-reduce", 8, 14 * MiB),
    ("all-to-all", 4, 6 * MiB), ("all-to-all", 8, 7 * MiB),
    ("collective-permute", 2, 8 * MiB),
])
def test_ring_formulas(kind, n, moved):
    assert collective_seconds(kind, 8 * MiB, n, False, UNIT) == pytest.approx(moved)
    # Across hosts the slower link (half the bandwidth here) sets the time.
    assert collective_seconds(kind, 8 * MiB, n, True, UNIT) == pytest.approx(2 * moved)


def test_latency_per_ring_step():
    spec = DeviceSpec("lat", "", (("f32", 1.0),), 1.0, 1e30, 1e30, 1e-6, 1e-5)
    assert collective_seconds("all-reduce", 1, 8, False, spec) == pytest.approx(14e-6)
    assert collective_seconds("all-gather", 1, 8, True, spec) == pytest.approx(7e-5)
    assert collective_seconds("all-gather", 1, 1, False, spec) == 0


def test_every_device_has_sourced_figures():
    for name in known_devices():
        spec = device_spec(name)
        assert spec.sources and spec.hbm_bytes_per_s > 0 and spec.link_within_host > 0
        assert {"f32", "bf16"} <= dict(spec.matmul_flops_per_s).keys()
    assert device_spec("cpu").nominal and not device_spec("h100").nominal


def _matmul(devices, dtype=jnp.bfloat16):
    mesh = Mesh(np.array(devices[:8]), ("x",), axis_types=(AxisType.Auto,))
    a = jax.ShapeDtypeStruct((4096, 8192), dtype, sharding=NamedSharding(mesh, P("x", None)))
    b = jax.ShapeDtypeStruct((8192, 4096), dtype, sharding=NamedSharding(mesh, P(None, None)))
    return jax.jit(lambda a, b: a @ b).lower(a, b).compile()


MATMUL_FLOPS = 2 * 4096 * 8192 * 4096 / 8  # per device: its 512 rows of the product


def test_matmul_flops_match_xla_cost_analysis():
    compiled = _matmul(jax.devices(), jnp.float32)
    cost = program_cost(parse_hlo_module(compiled.as_text()))
    assert cost.flops == MATMUL_FLOPS
    assert cost.flops == pytest.approx(compiled.cost_analysis()["flops"], rel=0.01)


def _loop_programs():
    def scan7(x):
        return jax.lax.scan(lambda h, _: (jnp.tanh(h @ h), None), x, None, length=7)[0]

    def fori(x):
        return jax.lax.fori_loop(3, 17, lambda i, h: jnp.sin(h) * i, x)

    def nested(x):
        return jax.lax.fori_loop(0, 4, lambda i, h: jax.lax.fori_loop(0, 6, lambda j, g: jnp.cos(g), h), x)

    return {"scan7": (scan7, 7), "fori": (fori, 14), "nested": (nested, None)}


@pytest.mark.parametrize("name", ["scan7", "fori", "nested"])
def test_inferred_trip_counts_equal_xla_known_trip_count(name):
    fn, expected = _loop_programs()[name]
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    module = parse_hlo_module(jax.jit(fn).lower(x).compile().as_text())
    loops = [i for c in module.computations.values() for i in c.instructions if i.opcode == "while"]
    assert loops
    for loop in loops:
        known = loop.backend_config().get("known_trip_count", {}).get("n")
        assert known is not None  # the CPU compiler annotates these: the oracle
        assert inferred_trip_count(module, loop) == int(known)
    if expected is not None:
        assert any(inferred_trip_count(module, lp) == expected for lp in loops)


@needs("jax_plugins.xla_cuda12", "the [gpu] extra is not installed")
def test_h100_matmul_is_flop_bound_at_the_published_peak():
    from jax_shard_lint.analyzer.platforms.gpu_targets import load_target, target_devices
    from jax_shard_lint.passes.hlo.step_time import estimate_step_time

    compiled = _matmul(target_devices(load_target("h100"), 8, 1))
    cost = program_cost(parse_hlo_module(compiled.as_text()))
    assert cost.flops == MATMUL_FLOPS  # the dot inside XLA's Triton GEMM fusion
    estimate, _ = estimate_step_time(cost, [], device_spec("h100"))
    # 34.4 GFLOP at 989.4 TFLOP/s (bf16, dense) = 34.7 us; the operands' 80 MB at 3.35 TB/s take less.
    assert estimate.compute_seconds == pytest.approx(MATMUL_FLOPS / 989.4e12, rel=0.01)
    assert estimate.flop_seconds > estimate.memory_seconds


@needs("libtpu", "the [tpu] extra is not installed")
def test_tpu_estimate_against_the_tpu_compilers_own():
    from jax_shard_lint.analyzer.platforms.tpu_targets import resolve_target, tpu_devices
    from jax_shard_lint.passes.hlo.cost import xla_cost_figures
    from jax_shard_lint.passes.hlo.step_time import estimate_step_time

    compiled = _matmul(tpu_devices(resolve_target("tpu-v5p", 8, None)))
    cost = program_cost(parse_hlo_module(compiled.as_text()))
    xla = xla_cost_figures(compiled.cost_analysis())
    assert cost.flops == MATMUL_FLOPS  # a convolution on TPU: the kernel's input features x window
    assert cost.flops == pytest.approx(xla["flops"], rel=0.01)
    estimate, _ = estimate_step_time(cost, [], device_spec("tpu-v5p"), xla)
    # The TPU compiler's own figure (101 us) against ours (75 us at 459 TFLOP/s): same order.
    assert 0.5 < estimate.compute_seconds / estimate.xla_optimal_seconds < 2


def test_lint_reports_a_time_block_and_sorts_collectives_by_it(cli):
    result = cli("lint", os.path.join("examples", "fsdp_tp_train_step.py"), "--format", "json", "-q",
                 "--fail-on", "never", "--set", "layers=2", "--set", "seq=256")
    target = json.loads(result.out)["targets"][0]
    time = target["time"]
    assert time["device"] == "cpu" and time["nominal"] and time["sources"]
    assert time["seconds"] == pytest.approx(max(time["compute_seconds"], time["async_communication_seconds"])
                                            + time["communication_seconds"] - time["async_communication_seconds"],
                                            rel=1e-4)
    seconds = [c["seconds"] for c in target["collectives"]]
    assert seconds == sorted(seconds, reverse=True)
    assert time["communication_seconds"] == pytest.approx(sum(seconds), rel=1e-3)


def test_a_parameter_read_through_gathers_counts_at_most_its_own_bytes():
    """pylcm's interpolation (examples/lcm_grid_search_kernel.py) reads the value array's row through two
    gathers at every (wealth, consumption) point, 64x more elements than the row has; the roofline counts
    HBM traffic, so each fusion reads an operand at most whole: at most its operands' and result's bytes as
    XLA's compiled text gives their shapes. Both layouts then do the same work per device, as they do."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "lcm_grid_search_kernel.py")
    targets = script_targets(path)
    bytes_moved = {}
    for name in ("V_on_pref_type", "V_on_wealth"):
        hlo = parse_hlo_module(targets[name].compile().as_text())
        cost = program_cost(hlo)
        for op in cost.ops:
            ins = hlo.by_name[op.name]
            whole = sum(_shape_bytes(hlo.by_name[o].shape) for o in ins.operands) + _shape_bytes(ins.shape)
            assert op.bytes <= whole, (name, op.name, op.bytes, whole)
        bytes_moved[name] = cost.bytes
    # The wealth layout copies V's shard for its all-gather and reads the gathered 2 MiB: it moves more, not
    # (as counted before) 16 MiB less.
    assert bytes_moved["V_on_pref_type"] < bytes_moved["V_on_wealth"]


def _shape_bytes(shape: str) -> int:
    sizes = {"f32": 4, "s32": 4, "u32": 4, "pred": 1, "bf16": 2, "f16": 2}
    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape):
        total += sizes[dtype] * int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
    return total
