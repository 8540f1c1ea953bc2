"""Helpers the model examples share: the user's own module beside the scripts."""

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def data_model_mesh(mesh_devices=None):
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    n = len(devices)
    model = 2 if n % 2 == 0 and n > 1 else 1
    return jax.make_mesh((n // model, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)


def abstract(tree, mesh, spec_for):
    """Abstract inputs: each leaf becomes a ShapeDtypeStruct with the sharding spec_for(path, leaf) gives."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec_for(path, x))), tree
    )


def megatron_spec(path, x):
    """Column-parallel first matrices, row-parallel second ones; vectors replicated."""
    name = jax.tree_util.keystr(path)
    if x.ndim == 2:
        return P(None, "model") if ("up" in name or "fc1" in name or "w1" in name) else P("model", None)
    return P()
