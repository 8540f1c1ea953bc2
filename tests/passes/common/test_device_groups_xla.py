"""Replica groups of real compiled collectives (8 CPU devices), mapped to the mesh axis the test summed
over, and the hosts they span under a host layout computed here from the devices' ids.

XLA numbers devices by mesh position (logical ids), whatever the physical order of the Mesh's devices;
the physical ids decide the hosts, so a permuted Mesh moves an axis from within-host to cross-host.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.common.device_groups import (
    MAX_GROUP_DEVICES,
    MalformedDeviceGroups,
    MeshInfo,
    axes_of_groups,
    axis_scopes,
    device_array,
    parse_replica_groups,
    spans_hosts,
)

try:
    from jax import shard_map
except ImportError:  # jax 0.10
    from jax.experimental.shard_map import shard_map

DEVICES_PER_HOST = 4
# Physical order that puts a row of a 2x4 mesh on both hosts (0,4,1,5 | 2,6,3,7).
INTERLEAVED = [0, 4, 1, 5, 2, 6, 3, 7]


def _xla_groups(text: str) -> list[list[int]]:
    """The test's own reading of the printed replica groups: explicit lists, an iota tile, or (jax 0.12's
    XLA) a mesh of logical ids in position order with the whole axes grouped."""
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}", text)
    if mesh:
        axes = [(n.strip("'"), int(v)) for n, v in (p.split("=") for p in mesh.group(1).split(","))]
        names = [n for n, _ in axes]
        grouped = [names.index(n.strip().strip("'")) for n in mesh.group(2).split(",")]
        arr = np.arange(int(np.prod([v for _, v in axes]))).reshape([v for _, v in axes])
        rest = [i for i in range(len(axes)) if i not in grouped]
        size = int(np.prod([axes[i][1] for i in grouped]))
        return arr.transpose(rest + grouped).reshape(-1, size).tolist()
    explicit = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)+)\}", text)
    if explicit:
        return [[int(x) for x in g.split(",")] for g in re.findall(r"\{([\d,]+)\}", explicit.group(1))]
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    assert iota, text
    out = [int(x) for x in iota.group(1).split(",")]
    arr = np.arange(int(np.prod(out))).reshape([int(x) for x in iota.group(2).split(",")])
    if iota.group(3):
        arr = arr.transpose([int(x) for x in iota.group(3).split(",")])
    return arr.reshape(out[0], -1).tolist()


def _psum(mesh: Mesh, axis: str) -> str:
    """The all-reduce line XLA compiled for a psum over ``axis``."""
    out_spec = P("x", None) if axis == "y" else P(None, "y")
    f = jax.jit(shard_map(lambda a: jax.lax.psum(a, axis), mesh=mesh, in_specs=P("x", "y"), out_specs=out_spec))
    hlo = f.lower(jnp.ones((8, 8), jnp.float32)).compile().as_text()
    lines = [ln for ln in hlo.splitlines() if "all-reduce(" in ln or "all-reduce-start(" in ln]
    assert len(lines) == 1, hlo
    return lines[0]


CASES = [(shape, order, axis) for shape in [(2, 4), (4, 2)] for order in ["iota", "interleaved"]
         for axis in ["x", "y"]]


@pytest.mark.parametrize("shape, order, axis", CASES, ids=[f"{s[0]}x{s[1]}-{o}-{a}" for s, o, a in CASES])
def test_compiled_psum_groups_map_to_its_axis_and_hosts(shape, order, axis):
    physical = list(range(8)) if order == "iota" else INTERLEAVED
    devices = np.array(jax.devices()[:8])[physical].reshape(shape)
    mesh = Mesh(devices, ("x", "y"))
    line = _psum(mesh, axis)
    xla_groups = _xla_groups(line)
    attr = re.search(r"replica_groups=(mesh\[[^\]]*\] \{[^}]*\}|\{(?:\{[\d,]*\},?)*\}"
                     r"|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)", line).group(1)
    info = MeshInfo((("x", shape[0]), ("y", shape[1])))

    groups = parse_replica_groups(attr, 8)
    assert sorted(map(sorted, groups)) == sorted(map(sorted, xla_groups))
    assert axes_of_groups(groups, info) == [axis]

    # Logical id i is the Mesh's i-th device; its host comes from that device's physical id.
    processes = tuple(d.id // DEVICES_PER_HOST for d in mesh.devices.flat)
    hosts_per_group = [len({devices.flat[d].id // DEVICES_PER_HOST for d in g}) for g in xla_groups]
    assert max(hosts_per_group) <= 2
    crosses = max(hosts_per_group) == 2
    assert spans_hosts(groups, processes) is crosses
    assert axis_scopes(info, processes)[axis] == ("cross-host" if crosses else "within-host")


def test_the_cases_cover_both_host_scopes():
    """Under the interleaved order the 2x4 mesh's x groups ({0,4}: physical 0 and 2) stay on host 0 while
    under iota they cross; its y rows do the opposite: both outcomes of each comparison are exercised."""
    for physical, within in [(list(range(8)), "y"), (INTERLEAVED, "x")]:
        devices = np.array(jax.devices()[:8])[physical].reshape(2, 4)
        processes = tuple(d.id // DEVICES_PER_HOST for d in devices.flat)
        scopes = axis_scopes(MeshInfo((("x", 2), ("y", 4))), processes)
        assert scopes[within] == "within-host"
        assert list(scopes.values()).count("cross-host") == 1


@pytest.mark.parametrize("physical", [list(range(8)), INTERLEAVED, [3, 1, 2, 0, 7, 5, 6, 4]])
def test_explicit_device_order_is_the_meshes(physical):
    devices = np.array(jax.devices()[:8])[physical].reshape(2, 4)
    ids = [d.id for d in devices.flat]
    text = ",".join(map(str, ids))
    assert device_array(text, [2, 4]).tolist() == np.array(ids).reshape(2, 4).tolist()
    with pytest.raises(MalformedDeviceGroups):
        device_array(",".join(map(str, ids[:-1])), [2, 4])
    with pytest.raises(MalformedDeviceGroups):
        device_array(text + ",8", [2, 4])


def test_group_limit_is_exact():
    """2^20 devices is the contract (far past any slice), written out here: the module's constant read back
    would move with it."""
    n = 1 << 20
    assert MAX_GROUP_DEVICES == n
    (group,) = parse_replica_groups(f"mesh['a'={n}] {{'a'}}", 1)
    assert len(group) == n
    with pytest.raises(MalformedDeviceGroups):
        parse_replica_groups(f"mesh['a'={n + 1}] {{'a'}}", 1)
    assert len(parse_replica_groups(f"[1,{n}]<=[{n}]", 1)[0]) == n
    with pytest.raises(MalformedDeviceGroups):
        parse_replica_groups(f"[1,{n + 1}]<=[{n + 1}]", 1)
