"""A train step whose MLP is a hand-written tensor-parallel block under ``shard_map``
(Megatron's column-parallel up projection, row-parallel down projection, one
``psum`` over 'model'), between two layers jit shards on its own.

``suggest`` keeps the block's in_specs and out_specs as written (a manual region is
the user's decision) and chooses the shardings around it: the other weights, the
batch, and how each operand reaches its in_spec."""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def tp_mlp(h, w_up, w_down, mesh):
    def body(h, w_up, w_down):
        return jax.lax.psum(jax.nn.gelu(h @ w_up) @ w_down, "model")

    return jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P(None, "model"), P("model", None)),
                         out_specs=P("data"))(h, w_up, w_down)


def loss(params, x, y, mesh):
    h = jnp.tanh(x @ params["w_in"])
    h = tp_mlp(h, params["w_up"], params["w_down"], mesh)
    return jnp.mean((h @ params["w_out"] - y) ** 2)


def train_step(params, x, y, mesh):
    grads = jax.grad(loss)(params, x, y, mesh)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def shard_lint_targets(batch=256, d_in=512, d_model=1024, d_ff=4096, d_out=256, mesh_devices=None):
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    mesh = jax.make_mesh((len(devices) // 2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2,
                         devices=devices)

    def spec(shape, pspec=P()):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, pspec))

    # Only the block's weights are split as its in_specs want; the rest is left replicated.
    params = {"w_in": spec((d_in, d_model)), "w_up": spec((d_model, d_ff), P(None, "model")),
              "w_down": spec((d_ff, d_model), P("model", None)), "w_out": spec((d_model, d_out))}
    step = jax.jit(lambda params, x, y: train_step(params, x, y, mesh))
    return {"train_step": step.lower(params, spec((batch, d_in), P("data")), spec((batch, d_out), P("data")))}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
