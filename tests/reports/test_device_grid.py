"""The HTML device grid draws every split dimension (newbie16 F8: it drew dims 0 and 1 only, so ys_obs
P('data', None, 'model') looked like P('data')). Each block's devices are JAX's own: the sharding's
devices_indices_map, each device named by its place in the mesh as the grid names it."""

import re
from collections import defaultdict

import jax
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.reports.common.device_grid import device_grid

_CELL = re.compile(r'<rect x="(\d+)" y="(\d+)"[^>]*/><text [^>]*>([\d,]+)</text>')
_PANEL = re.compile(r'<text class="panel" x="(\d+)" y="\d+">([^<]*)</text>')


def _jax_blocks(spec, shape):
    """{block's start along each dim: the mesh places of the devices holding it}, from JAX."""
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:8])
    place = {d: i for i, d in enumerate(mesh.devices.flat)}
    blocks = defaultdict(set)
    for device, index in NamedSharding(mesh, spec).devices_indices_map(shape).items():
        blocks[tuple(s.start or 0 for s in index)].add(place[device])
    return blocks


@pytest.mark.parametrize("spec", [P("data", None, "model"), P(None, "data", "model"), P("data", "model", None)])
def test_each_block_of_every_split_dimension_is_drawn_with_its_devices(spec):
    shape = (1024, 32, 64)
    svg = device_grid([[a] if a else [] for a in spec] + [[]] * (3 - len(spec)), list(shape),
                      {"data": 4, "model": 2})
    panels = [int(x) for x, _ in _PANEL.findall(svg)] or [0]
    drawn = {}
    for x, y, label in _CELL.findall(svg):
        panel = max(k for k, x0 in enumerate(panels) if int(x) >= x0)
        drawn[(panel, int(y), int(x))] = frozenset(map(int, label.split(",")))
    expected = _jax_blocks(spec, shape)
    # One cell per block JAX has, each with the devices JAX puts there.
    assert sorted(map(sorted, drawn.values())) == sorted(map(sorted, expected.values()))
    if spec[2] is not None:
        # dim 2 split: a panel per block, named, and each panel's devices the ones holding that block of dim 2.
        assert [t for _, t in _PANEL.findall(svg)] == ["dim 2 (model) 1/2", "dim 2 (model) 2/2"]
        for k in range(2):
            in_panel = set().union(*(d for (p, _, _), d in drawn.items() if p == k))
            assert in_panel == set().union(*(d for start, d in expected.items() if start[2] == k * 32))
    else:
        assert not _PANEL.findall(svg)
