"""An Equinox MLP stack with optax Adam, through eqx.partition and plain jax.jit."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from mesh_util import abstract, data_model_mesh, megatron_spec


class Block(eqx.Module):
    fc1: eqx.nn.Linear
    fc2: eqx.nn.Linear

    def __init__(self, d_model, d_ff, key):
        k1, k2 = jax.random.split(key)
        self.fc1 = eqx.nn.Linear(d_model, d_ff, key=k1)
        self.fc2 = eqx.nn.Linear(d_ff, d_model, key=k2)

    def __call__(self, h):
        return h + self.fc2(jax.nn.gelu(self.fc1(h)))


class Model(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: tuple

    def __init__(self, vocab=4096, d_model=512, d_ff=2048, layers=2, key=None):
        keys = jax.random.split(key, layers + 1)
        self.embed = eqx.nn.Embedding(vocab, d_model, key=keys[0])
        self.blocks = tuple(Block(d_model, d_ff, k) for k in keys[1:])

    def __call__(self, tokens):
        h = jax.vmap(self.embed)(tokens)
        for block in self.blocks:
            h = jax.vmap(block)(h)
        return h @ self.embed.weight.T


optimizer = optax.adam(1e-3)


def loss_fn(params, static, tokens):
    model = eqx.combine(params, static)
    logits = jax.vmap(model)(tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.roll(tokens, -1, axis=1)).mean()


def train_step(params, opt_state, static, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, static, tokens)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return eqx.apply_updates(params, updates), opt_state, loss


def step_and_inputs(batch=32, seq=128, mesh_devices=None):
    """The step, its jit options and its abstract inputs."""
    mesh = data_model_mesh(mesh_devices)
    model = eqx.filter_eval_shape(Model, key=jax.random.key(0))
    params_shape, static = eqx.partition(model, lambda x: isinstance(x, jax.ShapeDtypeStruct))
    params = abstract(params_shape, mesh, megatron_spec)
    opt_state = abstract(jax.eval_shape(optimizer.init, params_shape), mesh, megatron_spec)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return train_step, {"static_argnums": 2}, (params, opt_state, static, tokens)


def shard_lint_targets(batch=32, seq=128, mesh_devices=None):
    fn, options, args = step_and_inputs(batch, seq, mesh_devices)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
