"""A collective over groups of one device (XLA on CPU keeps a shard_map's all-gather and psum over a
mesh axis of size 1, with replica_groups={{0},{1},...}): its group size is the text's, 1, and it is
labelled with no device span. Kills '<N devices>' given to a group of one (`group_size >= 1`)."""

import jax
import jax.numpy as jnp
from hlo_oracle import compiled_collectives
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.parser import parse_hlo_module


def test_a_group_of_one_device_spans_no_devices():
    mesh = jax.make_mesh((1, 8), ("one", "x"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    body = lambda a: jax.lax.all_gather(a, "one", tiled=True) + jax.lax.psum(a, "one")  # noqa: E731
    fn = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    text = jax.jit(fn).lower(jax.ShapeDtypeStruct((64, 8), jnp.float32,
                                                  sharding=NamedSharding(mesh, P("x")))).compile().as_text()
    compiled = compiled_collectives(text, 8)
    assert {kind for kind, _, _ in compiled.values()} == {"all-gather", "all-reduce"}
    assert {n for _, _, n in compiled.values()} == {1}
    for mesh_info in (MeshInfo((("one", 1), ("x", 8))), None):
        found = find_collectives(parse_hlo_module(text), mesh_info).collectives
        assert {c.hlo_name: (c.kind, c.bytes, c.group_size) for c in found} == compiled
        assert not [a for c in found for a in c.mesh_axes if "devices" in a], [c.mesh_axes for c in found]
