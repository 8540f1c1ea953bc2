"""Replica groups in XLA's four syntaxes, mapped onto the user's mesh axes."""

import pytest

from jax_shard_lint.passes.common.device_groups import (
    MeshInfo,
    axes_of_groups,
    axes_of_pairs,
    parse_replica_groups,
    parse_source_target_pairs,
)

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

MESH = MeshInfo((("data", 4), ("model", 2)))


@pytest.mark.parametrize("text, groups", [
    ("{{0,2,4,6},{1,3,5,7}}", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("[2,4]<=[4,2]T(1,0)", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("[4,2]<=[8]", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0'}", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1'}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0','axis_1'}", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_1','axis_0'}", [[0, 2, 4, 6, 1, 3, 5, 7]]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0':(1)2}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("{}", [[0, 1, 2, 3, 4, 5, 6, 7]]),
])
def test_group_syntaxes(text, groups):
    assert parse_replica_groups(text, 8) == groups


@pytest.mark.parametrize("text, axes", [
    ("[2,4]<=[4,2]T(1,0)", ["data"]),
    ("{{0,1},{2,3},{4,5},{6,7}}", ["model"]),
    ("{}", ["data", "model"]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0':(1)2}", ["data:(1)2"]),
    ("mesh['axis_0'=4,'axis_1'=2] {'axis_0':(2)2}", ["data:(2)2"]),
    # XLA's own mesh can order devices differently from the user's (transposed iota).
    ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,2,2]T(2,1,0)) {'axis_0':(2)2}", ["data:(2)2"]),
])
def test_groups_map_to_user_axes(text, axes):
    assert axes_of_groups(parse_replica_groups(text, 8), MESH) == axes


def test_user_mesh_with_its_own_device_order():
    mesh = MeshInfo((("data", 4), ("model", 2)), device_ids=(0, 2, 4, 6, 1, 3, 5, 7))
    # Positions (d, m) hold ids 0,2 | 4,6 | 1,3 | 5,7: varying d alone visits 0, 4, 1, 5.
    assert axes_of_groups([[0, 4, 1, 5], [2, 6, 3, 7]], mesh) == ["data"]
    assert axes_of_groups([[0, 1, 2, 3], [4, 5, 6, 7]], mesh) == ["data:(1)2", "model"]


def test_collective_permute_pairs():
    pairs = parse_source_target_pairs("{{0,2},{2,4},{4,6},{6,0}}")
    assert axes_of_pairs(pairs, MESH) == ["data"]


def test_unreadable_groups_raise():
    from jax_shard_lint.passes.common.device_groups import DeviceGroupError

    with pytest.raises(DeviceGroupError):
        parse_replica_groups("mesh['axis_0'=4] {'nope'}", 4)
