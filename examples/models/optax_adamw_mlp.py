"""An MLP trained with optax AdamW, jitted without out_shardings or donation."""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from mesh_util import abstract, data_model_mesh, megatron_spec


def init_params(d_model=512, d_ff=2048, layers=2, vocab=4096):
    k = jax.random.key(0)
    params = {"embed": jax.random.normal(k, (vocab, d_model)) * 0.02, "blocks": []}
    for _ in range(layers):
        params["blocks"].append({
            "up": jax.random.normal(k, (d_model, d_ff)) * 0.02,
            "down": jax.random.normal(k, (d_ff, d_model)) * 0.02,
            "scale": jnp.ones((d_model,)),
        })
    return params


def loss_fn(params, tokens):
    h = params["embed"][tokens]
    for block in params["blocks"]:
        x = h * block["scale"]
        h = h + jax.nn.gelu(x @ block["up"]) @ block["down"]
    logits = h @ params["embed"].T
    return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.roll(tokens, -1, axis=1)).mean()


optimizer = optax.adamw(1e-3)


def train_step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss


def step_and_inputs(batch=32, seq=128, mesh_devices=None):
    """The step, its jit options and its abstract inputs."""
    mesh = data_model_mesh(mesh_devices)
    params_shape = jax.eval_shape(init_params)
    params = abstract(params_shape, mesh, megatron_spec)
    opt_state = abstract(jax.eval_shape(optimizer.init, params_shape), mesh, megatron_spec)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return train_step, {}, (params, opt_state, tokens)


def shard_lint_targets(batch=32, seq=128, mesh_devices=None):
    fn, options, args = step_and_inputs(batch, seq, mesh_devices)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
