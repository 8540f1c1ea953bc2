"""involuntary_remat: XLA's "Involuntary full rematerialization" warning read into mesh axes, in both
spellings XLA has printed (tile assignments up to 0.10, named meshes from 0.12). The texts are XLA's
own, printed for jax#21562's pattern (P('y', None, 'x') to P(None, ('x', 'y'), None) on a 4 x 2 mesh)."""

from __future__ import annotations

import pytest

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.involuntary_remat import read_involuntary_remats
from jax_shard_lint.passes.rules.sl104_involuntary_full_rematerialization import staged_layouts

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

MESH = MeshInfo((("x", 4), ("y", 2)))
_TAIL = (". As the last resort, SPMD will replicate the tensor and then partition it to obtain the target sharding, "
         "which is inefficient.")
XLA_0_10 = ("W1124 14:22:00.688929    9934 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The "
            "compiler cannot go from sharding {devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for "
            "HLO operation %sin.0 = f32[8,64,8]{2,1,0} sine(%param), sharding={devices=[2,1,4]<=[4,2]T(1,0)}, "
            'metadata={op_name="jit(f)/sin" stack_frame_id=2}' + _TAIL)
XLA_0_12 = ("W1124 14:22:02.227153    9945 spmd_partitioner.cc:666] [SPMD] Involuntary full rematerialization. The "
            "compiler cannot go from sharding {mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]} to {mesh['x'=4,'y'=2], [{}, "
            "{'x', 'y'}, {}]} efficiently for HLO operation %param = f32[8,64,8]{2,1,0} parameter(0), "
            "sharding={mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]}, metadata={op_name=\"a\"}" + _TAIL)


def test_both_spellings_read_as_the_same_layouts():
    (old,) = read_involuntary_remats(XLA_0_10, MESH)
    (new,) = read_involuntary_remats(XLA_0_12, MESH)
    for r in (old, new):
        assert r.source_sharding == (("y",), (), ("x",))
        assert r.target_sharding == ((), ("x", "y"), ())
        assert (r.dtype, r.global_shape) == ("f32", (16, 64, 32))
    assert (old.instruction, old.op_name, old.stack_frame_id) == ("sin.0", "jit(f)/sin", 2)
    assert (new.instruction, new.op_name, new.stack_frame_id) == ("param", "a", None)


def test_a_module_partitioned_twice_warns_once_per_value():
    assert len(read_involuntary_remats("\n".join([XLA_0_10, "I0000 other log line", XLA_0_10]), MESH)) == 1


def test_other_stderr_is_no_warning():
    assert read_involuntary_remats("W0000 spmd_partitioner.cc:1] something else\n", MESH) == ()


def test_the_staged_path_moves_one_axis_per_step():
    assert staged_layouts((("y",), (), ("x",)), ((), ("x", "y"), ())) == [
        (("y",), ("x",), ()), ((), ("x", "y"), ())]
    # An axis new to the value is a slice; one that leaves is gathered at the end.
    assert staged_layouts((("x",), ()), ((), ("y",))) == [(("x",), ("y",)), ((), ("y",))]


def test_a_value_without_metadata_is_still_read():
    bare = XLA_0_12.replace(', metadata={op_name="a"}', "")
    (r,) = read_involuntary_remats(bare, MESH)
    assert (r.op_name, r.target_sharding) == (None, ((), ("x", "y"), ()))


# A host callback's operand and result (jax.pure_callback in a step on a data=4 x model=2 mesh: the operand x[:32] of
# P('data', 'model') goes to the one device that runs the callback, its result comes back to P(None, 'model')), as
# XLA printed them: 0.10 writes the one device {maximal device=0}, 0.12 {single_device[device_id=0]} (0.12 moves the
# operand without the warning). A newcomer's diffrax step read these as "from P()" (0.10) or no layouts (0.12).
CALLBACK_MESH = MeshInfo((("data", 4), ("model", 2)))
CALLBACK_OPERAND_0_10 = (
    'W1128 03:18:51.310461    4724 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The compiler'
    ' cannot go from sharding {devices=[4,2]<=[8]} to {maximal device=0} efficiently for HLO operation %copy = f32['
    '8,32]{1,0} copy(%dynamic-slice), sharding={devices=[4,2]<=[8]}, metadata={op_name="jit(step)/slice" stack_fram'
    'e_id=3}' + _TAIL)
CALLBACK_RESULT_0_10 = (
    'W1128 03:18:51.310673    4724 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The compiler'
    ' cannot go from sharding {maximal device=0} to {devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate} efficien'
    'tly for HLO operation %get-tuple-element = f32[32,64]{1,0} get-tuple-element(%conditional), index=0, sharding='
    '{maximal device=0}, metadata={op_name="jit(step)/pure_callback" stack_frame_id=4}' + _TAIL)
CALLBACK_RESULT_0_12 = (
    'W1128 03:18:53.785336    4728 spmd_partitioner.cc:666] [SPMD] Involuntary full rematerialization. The compiler'
    " cannot go from sharding {single_device[device_id=0]} to {mesh['data'=4,'model'=2], [{}, {'model'}]} efficient"
    'ly for HLO operation %get-tuple-element = f32[32,64]{1,0} get-tuple-element(%conditional), index=0, sharding={'
    'single_device[device_id=0]}, metadata={op_name="jit(step)/pure_callback" stack_frame_id=4}' + _TAIL)


def test_a_host_callbacks_side_is_read_as_one_device():
    (operand,) = read_involuntary_remats(CALLBACK_OPERAND_0_10, CALLBACK_MESH)
    assert (operand.source_device, operand.target_device) == (None, 0)
    assert operand.source_sharding == (("data",), ("model",))
    for text in (CALLBACK_RESULT_0_10, CALLBACK_RESULT_0_12):
        (result,) = read_involuntary_remats(text, CALLBACK_MESH)
        assert (result.source_device, result.target_device) == (0, None), text
        assert result.target_sharding == ((), ("model",))
        assert (result.dtype, result.global_shape, result.op_name) == ("f32", (32, 64), "jit(step)/pure_callback")
