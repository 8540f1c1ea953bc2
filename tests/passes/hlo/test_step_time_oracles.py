"""The step time's remaining one-line bugs (.ci/mutation's survivors on passes/hlo/step_time.py), each
against a figure read in the test from the compiled text: the slowest-first order when two
collectives take the same time, the serial time of a step with work on another thread, the notes
that name that thread and the custom calls counted by their bytes only, and the peak of a dtype the
device lists beside f32."""

import re

import jax
import jax.numpy as jnp
import pytest
from hlo_oracle import compiled_collectives
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from test_hlo_parsing import SPARSECORE_MODULE

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.cost import program_cost
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.step_time import estimate_step_time
from jax_shard_lint.passes.models.device_spec import DeviceSpec

# One FLOP, one byte per second, no latency: a collective's seconds are its ring bytes.
_UNIT = DeviceSpec("unit", "unit", (("f32", 1.0),), 1.0, 1.0, 1.0, 0.0, 0.0)


def test_collectives_of_equal_time_are_listed_largest_first():
    # Kills the tie-break of the slowest-first order reversed: an all-gather over 2 devices moves half
    # its result, as many bytes as a permute of its operand moves, so both take the same time and the
    # one with more bytes (the gather's result) comes first. Bytes and groups from the compiled text.
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))

    def body(a):
        return jax.lax.all_gather(a, "x", tiled=True), jax.lax.ppermute(a, "x", [(0, 1), (1, 0)])

    fn = jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=(P("x", "y"), P("x", "y")), check_vma=False)
    a = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    text = jax.jit(fn).lower(a).compile().as_text()
    compiled = compiled_collectives(text, 8)
    by_kind = {kind: (name, nbytes, n) for name, (kind, nbytes, n) in compiled.items()}
    gather, permute = by_kind["all-gather"], by_kind["collective-permute"]
    assert (gather[1], gather[2]) == (2 * permute[1], 2)  # (n-1)/n x 2B = B: equal ring bytes
    found = find_collectives(parse_hlo_module(text), MeshInfo((("x", 2), ("y", 4)))).collectives
    _, timed = estimate_step_time(program_cost(parse_hlo_module(text)), found, _UNIT)
    assert [c.seconds for c in timed] == [permute[1], permute[1]]
    assert [c.hlo_name for c in timed] == [gather[0], permute[0]]


def test_work_on_another_thread_adds_to_the_serial_time_and_is_named():
    # Kills the serial time taking the offloaded work off rather than adding it, and the note's list
    # of that work filtered by a comparison that only the name "sparsecore" passes: XLA's host offload
    # runs on the thread "host". The oracle: the gather's f32[4096,1024] result, read and written.
    gather_bytes = 2 * 4096 * 1024 * 4
    for thread in ("sparsecore", "host"):
        text = SPARSECORE_MODULE.replace('"sparsecore"', f'"{thread}"')
        assert len(re.findall(rf'execution_thread="{thread}"', text)) == 2
        estimate, _ = estimate_step_time(program_cost(parse_hlo_module(text)), [], _UNIT)
        assert estimate.compute_seconds == 0
        # (six significant digits: the JSON's)
        assert estimate.offloaded_seconds == estimate.serial_seconds == pytest.approx(gather_bytes, rel=1e-5)
        assert any(f"work on the {thread} thread (1 ops)" in n for n in estimate.notes), estimate.notes


# A cuDNN convolution as XLA's GPU compiler writes it (custom call, no called computation): no FLOP
# count is known for it.
_CUDNN_MODULE = """HloModule jit_conv, num_partitions=1

ENTRY %main (p0: bf16[8,64,32,32], p1: bf16[64,64,3,3]) -> bf16[8,64,32,32] {
  %p0 = bf16[8,64,32,32]{3,2,1,0} parameter(0)
  %p1 = bf16[64,64,3,3]{3,2,1,0} parameter(1)
  %conv = (bf16[8,64,32,32]{3,2,1,0}, u8[0]{0}) custom-call(%p0, %p1), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, custom_call_target="__cudnn$convForward"
  ROOT %out = bf16[8,64,32,32]{3,2,1,0} get-tuple-element(%conv), index=0
}
"""  # noqa: E501 (XLA's line, as it writes it)


def test_custom_calls_counted_by_bytes_only_are_named():
    targets = re.findall(r'custom_call_target="([^"]+)"', _CUDNN_MODULE)
    estimate, _ = estimate_step_time(program_cost(parse_hlo_module(_CUDNN_MODULE)), [], _UNIT)
    assert estimate.flop_seconds == 0 and estimate.memory_seconds > 0
    assert ("custom calls without known FLOPs counted by their bytes only: " + ", ".join(targets)) in estimate.notes


def test_a_dtype_the_device_lists_runs_at_its_own_peak():
    # Kills the peak's lookup joined with 'and' (a dtype listed beside f32 read at f32's peak); a dtype
    # the device does not list runs at f32's, and without f32 at the fastest listed.
    spec = DeviceSpec("two", "two", (("bf16", 4.0), ("f32", 1.0)), 1.0, 1.0, 1.0, 0.0, 0.0)
    assert (spec.peak("bf16"), spec.peak("f32"), spec.peak("s8")) == (4.0, 1.0, 1.0)
    assert DeviceSpec("one", "one", (("bf16", 4.0), ("s8", 8.0)), 1.0, 1.0, 1.0, 0.0, 0.0).peak("f16") == 8.0
    with pytest.raises(ValueError):  # no peak at all: nothing to divide by
        DeviceSpec("none", "none", (), 1.0, 1.0, 1.0, 0.0, 0.0).peak("f32")
