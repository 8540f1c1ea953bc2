"""A rematerialised (``jax.checkpoint``) layer stack whose memory is set by the batch.

The forward pass scans a stack of residual MLP blocks; each block is wrapped in
``jax.checkpoint`` so the backward pass recomputes activations instead of
keeping them. The batch is sharded over ``data`` and the weights over
``model``. The per-device peak grows linearly with ``batch``: use this script to
size a batch against a device budget.

    jax-shard-lint lint examples/remat_layer_stack.py --set batch=64 --device h100
    jax-shard-lint lint examples/remat_layer_stack.py --set batch=512 --budget 16GiB
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def block(h, w):
    up = jax.nn.gelu(h @ w["up"])
    return h + up @ w["down"]


def loss_fn(weights, x, y):
    h, _ = jax.lax.scan(lambda h, w: (jax.checkpoint(block)(h, w), None), x, weights)
    return jnp.mean((h - y) ** 2)


def train_step(weights, x, y, lr=1e-2):
    loss, grads = jax.value_and_grad(loss_fn)(weights, x, y)
    return jax.tree.map(lambda w, g: w - lr * g, weights, grads), loss


def shard_lint_targets(batch=64, seq=2048, d_model=2048, d_ff=8192, layers=16, mesh_devices=None):
    # The tool passes the devices it compiles for (virtual CPUs, or an H100 target's).
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    n = len(devices)
    model = 2 if n % 2 == 0 and n > 1 else 1
    mesh = jax.make_mesh((n // model, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)

    def spec(shape, pspec, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    weights = {
        "up": spec((layers, d_model, d_ff), P(None, None, "model")),
        "down": spec((layers, d_ff, d_model), P(None, "model", None)),
    }
    x = spec((batch, seq, d_model), P("data"))
    y = spec((batch, seq, d_model), P("data"))
    w_sharding = jax.tree.map(lambda s: s.sharding, weights)
    step = jax.jit(train_step, out_shardings=(w_sharding, NamedSharding(mesh, P())), donate_argnums=(0,))
    return {"train_step": step.lower(weights, x, y)}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
