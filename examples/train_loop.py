"""An ordinary training loop, run unmodified by ``jax-shard-lint run``.

It compiles several programs (an initialiser, a training step, an evaluation
step) and has the habits the source rules look for: the step is jitted without
``out_shardings`` and fed its own outputs, the loss is pulled to the host every
iteration, and a NaN check runs outside ``jit``.

    jax-shard-lint run examples/train_loop.py --devices 8 -- --steps 3
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def init(key, d):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (d, 4 * d)) * 0.02, "w2": jax.random.normal(k2, (4 * d, d)) * 0.02}


def loss_fn(params, x):
    h = jax.nn.gelu(x @ params["w1"]) @ params["w2"]
    return jnp.mean((h - x) ** 2)


def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads), loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--fail-at", type=int, default=-1, help="raise at this step (to see a partial report)")
    args = parser.parse_args()

    n = len(jax.devices())
    mesh = jax.make_mesh((n // 2, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    w_sharding = {"w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
    params = jax.jit(init, static_argnums=1, out_shardings=w_sharding)(jax.random.key(0), args.d)
    step = jax.jit(train_step)
    evaluate = jax.jit(loss_fn)
    batch = jax.device_put(np.ones((64, args.d), np.float32), NamedSharding(mesh, P("data")))
    losses = []
    for i in range(args.steps):
        if i == args.fail_at:
            raise RuntimeError(f"data loader failed at step {i}")
        params, loss = step(params, batch)
        losses.append(np.asarray(loss))
        if jnp.any(jnp.isnan(loss)):
            break
    print("eval", float(evaluate(params, batch)), "losses", losses)


if __name__ == "__main__":
    main()
