"""The HLO parser and the collectives pass on golden fixtures XLA wrote
(fixtures/generate_fixtures.py): CPU compiles and deviceless H100 compiles with
async collectives, while loops and fusions. Expected values were read off the
HLO text itself."""

import os

import pytest
from conftest import FIXTURES

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import computation_multiplicity, find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module, parse_instruction
from jax_shard_lint.passes.models.errors import HloParseError

DATA_MODEL = MeshInfo((("data", 4), ("model", 2)))
FSDP_TP = MeshInfo((("fsdp", 4), ("tp", 2)))


def load(name):
    with open(os.path.join(FIXTURES, "hlo", f"{name}.hlo")) as f:
        return parse_hlo_module(f.read())


def summary(name, mesh):
    return sorted(
        (c.kind, c.bytes, c.count, tuple(c.mesh_axes), tuple(c.shape), c.is_async)
        for c in find_collectives(load(name), mesh).collectives
    )


def test_module_structure():
    m = load("cpu_scan")
    assert m.name == "jit_step"
    assert m.num_partitions == 8
    assert m.entry_computation.is_entry
    assert len(m.computations) == 14
    loops = [i for c in m.computations.values() for i in c.instructions if i.opcode == "while"]
    assert [i.backend_config()["known_trip_count"]["n"] for i in loops] == ["5"]


def test_stack_frames_point_at_the_users_lines():
    m = load("cpu_scan")
    ag = [i for i in m.computations[m.entry].instructions if i.opcode == "all-gather"][0]
    src = m.source_of(ag)
    # The line of `return jnp.tanh(h @ w), None` in scan_program's body, in the generator that compiled it.
    with open(os.path.join(FIXTURES, "generate_fixtures.py")) as f:
        line = next(i for i, text in enumerate(f, 1) if "return jnp.tanh(h @ w), None" in text)
    assert src.line == line and src.file.endswith("generate_fixtures.py")
    assert src.function == "scan_program.<locals>.step.<locals>.body"


def test_cpu_scan_collectives():
    assert summary("cpu_scan", DATA_MODEL) == [
        ("all-gather", 65536, 5, ("model",), (32, 512), False),  # inside the while body: x5
        ("all-gather", 524288, 1, ("data",), (512, 256), False),  # hoisted out of the loop by XLA
        ("all-reduce", 1024, 1, ("data",), (256,), False),
    ]


def test_h100_scan_collectives_are_async_and_stay_in_the_loop():
    assert summary("h100_scan", DATA_MODEL) == [
        ("all-gather", 65536, 5, ("model",), (32, 512), True),
        ("all-gather", 524288, 5, ("data",), (512, 256), True),
        ("all-reduce", 1024, 1, ("data",), (256,), True),
    ]


def test_gpu_compile_reduce_scatters_where_cpu_all_reduces():
    cpu = {c[0] for c in summary("cpu_fsdp", FSDP_TP)}
    gpu = {c[0] for c in summary("h100_fsdp", FSDP_TP)}
    assert "reduce-scatter" in gpu and "reduce-scatter" not in cpu
    assert "all-reduce" in cpu
    # The gradient of w['down'] (f32[4096,1024] on fsdp x tp): a 2 MiB reduce-scatter on H100.
    assert ("reduce-scatter", 2097152, 1, ("fsdp",), (256, 2048), True) in summary("h100_fsdp", FSDP_TP)


def test_async_start_bytes_come_from_the_done_op():
    m = load("h100_scan")
    starts = [i for c in m.computations.values() for i in c.instructions if i.opcode == "all-gather-start"]
    assert starts and all(i.shape.startswith("(") for i in starts)  # (operand, result) bookkeeping tuples
    assert {c.bytes for c in find_collectives(m, DATA_MODEL).collectives if c.kind == "all-gather"} == {65536, 524288}


def test_multiplicity_through_fusions_and_loops():
    m = load("cpu_scan")
    found = computation_multiplicity(m)
    counts, unknown = found.counts, found.unknown
    assert counts[m.entry] == 1 and not unknown
    body = [i for i in m.computations[m.entry].instructions if i.opcode == "while"][0]
    assert counts[dict(body.called())["body"]] == 5
    assert counts[dict(body.called())["condition"]] == 6


def test_instruction_with_tuple_shape_and_nested_attributes():
    ins = parse_instruction(
        '%ag = (f32[8]{0}, f32[64]{0}) all-gather-start(f32[8]{0} %p), channel_id=1, '
        "replica_groups=mesh['axis_0'=8] {'axis_0'}, dimensions={0}, "
        'metadata={op_name="jit(f)/x[\\"a\\"]" source_file="/a b.py" source_line=3}, '
        'backend_config={"is_sync":true}'
    )
    assert ins.opcode == "all-gather-start" and ins.operands == ("p",)
    assert ins.attrs["replica_groups"] == "mesh['axis_0'=8] {'axis_0'}"
    assert ins.metadata == {"op_name": 'jit(f)/x["a"]', "source_file": "/a b.py", "source_line": 3}
    assert ins.backend_config() == {"is_sync": True}


@pytest.mark.parametrize("text, message", [
    ("module @m {}", "not an HLO module"),
    ("HloModule m\n\n%c (a: f32[]) -> f32[] {\n  ROOT %a = f32[] parameter(0)\n}\n", "no ENTRY"),
    ("HloModule m\n\nENTRY %c (a: f32[]) -> f32[] {\n  ROOT %a = f32[] parameter(0)\n", "not closed"),
])
def test_malformed_modules_raise(text, message):
    with pytest.raises(HloParseError, match=message):
        parse_hlo_module(text)


def test_tpu_layouts_and_mesh_replica_groups():
    # TPU HLO: tiled layouts ({1,0:T(8,128)(2,1)}), bf16 matmul operands, groups as
    # mesh['axis_0'=4,'axis_1'=2] {'axis_1'} or iota. Bytes by hand from the fixture's shapes:
    # bf16[32,512] = 32 KiB over axis_1 (model), bf16[512,256] = 256 KiB over axis_0 (data),
    # f32[256] = 1 KiB over axis_0. The TPU compiler leaves known_trip_count out of its
    # while loops: the count (5, the scan's length) is read from the loop's condition.
    assert summary("tpu_v5p_scan", DATA_MODEL) == [
        ("all-gather", 32768, 5, ("model",), (32, 512), False),
        ("all-gather", 262144, 5, ("data",), (512, 256), False),
        ("all-reduce", 1024, 1, ("data",), (256,), False),
    ]
    fsdp = summary("tpu_v5p_fsdp", FSDP_TP)
    assert not any(axes and axes[0].startswith("<") for _, _, _, axes, _, _ in fsdp)


SPARSECORE_MODULE = """HloModule jit_train_step, num_partitions=8

%called_computation.2 (param_0.774: f32[32768,1024], param_1.817: s32[4096]) -> f32[4096,1024] {
  %param_0.774 = f32[32768,1024]{1,0:T(8,128)} parameter(0)
  %param_1.817 = s32[4096]{0:T(1024)} parameter(1)
  ROOT %gather.20 = f32[4096,1024]{1,0:T(8,128)} gather(%param_0.774, %param_1.817), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,1024}, metadata={op_name="jit(train_step)/jvp()/gather"}
}, execution_thread="sparsecore"

ENTRY %main (p0: f32[32768,1024], p1: s32[4096]) -> f32[4096,1024] {
  %p0 = f32[32768,1024]{1,0:T(8,128)} parameter(0)
  %p1 = s32[4096]{0:T(1024)} parameter(1)
  %start = ((f32[32768,1024]{1,0:T(8,128)}, s32[4096]{0:T(1024)}), f32[4096,1024]{1,0:T(8,128)}, u32[]{:S(8)}) call-start(%p0, %p1), async_execution_thread="sparsecore", to_apply=%called_computation.2
  ROOT %done = f32[4096,1024]{1,0:T(8,128)} call-done(%start)
}
"""  # noqa: E501 (XLA's lines, as it writes them)


def test_sparsecore_computations_close_with_their_thread():
    # libtpu 0.0.50 (JAX 0.12) offloads an embedding gather to the TPU's SparseCores and writes the
    # computation's thread after its closing brace (the shape above is its output for
    # examples/fsdp_tp_train_step.py on tpu-v5p, cut down).
    module = parse_hlo_module(SPARSECORE_MODULE)
    assert {c.name: c.execution_thread for c in module.computations.values()} == {
        "called_computation.2": "sparsecore", "main": "main"}
    assert module.entry == "main" and module.by_name["gather.20"].opcode == "gather"
    with pytest.raises(HloParseError, match="is not a thread name"):
        parse_hlo_module(SPARSECORE_MODULE.replace('"sparsecore"', '"sparse core"'))


def test_sparsecore_work_is_counted_beside_compute():
    """The gather XLA moved to the SparseCores is work of the step: counted by its bytes (the oracle: its
    f32[4096,1024] result in the text, read and written), on its own thread, overlapped with compute."""
    from jax_shard_lint.analyzer.platforms.performance import device_spec
    from jax_shard_lint.passes.hlo.cost import program_cost
    from jax_shard_lint.passes.hlo.step_time import estimate_step_time

    cost = program_cost(parse_hlo_module(SPARSECORE_MODULE))
    [gather] = [op for op in cost.ops if op.name == "gather.20"]
    assert (gather.thread, gather.bytes, gather.runs) == ("sparsecore", 2 * 4096 * 1024 * 4, 1)
    spec = device_spec("tpu-v5p")
    estimate, _ = estimate_step_time(cost, [], spec)
    assert estimate.offloaded_seconds == pytest.approx(gather.bytes / spec.hbm_bytes_per_s, rel=1e-5)
    assert estimate.compute_seconds == 0 and estimate.seconds == estimate.offloaded_seconds
    assert any("sparsecore thread" in n for n in estimate.notes)
