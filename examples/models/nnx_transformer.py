"""A Flax NNX MLP block stack trained with optax through nnx.Optimizer, split into
pure state for jax.jit.

    jax-shard-lint lint examples/models/nnx_transformer.py --set embed_on=d_model   # SL103
"""

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from mesh_util import abstract, data_model_mesh, megatron_spec


class Block(nnx.Module):
    def __init__(self, d_model, d_ff, rngs):
        self.norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.up = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.down = nnx.Linear(d_ff, d_model, rngs=rngs)

    def __call__(self, h):
        return h + self.down(jax.nn.gelu(self.up(self.norm(h))))


class Model(nnx.Module):
    def __init__(self, vocab=4096, d_model=512, d_ff=2048, layers=2, rngs=None):
        self.embed = nnx.Embed(vocab, d_model, rngs=rngs)
        self.blocks = nnx.List([Block(d_model, d_ff, rngs) for _ in range(layers)])

    def __call__(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.embed.attend(h)


def loss_fn(model, tokens):
    logits = model(tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.roll(tokens, -1, axis=1)).mean()


def build():
    model = Model(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    return model, optimizer


def train_step(graphdef, state, tokens):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens)
    optimizer.update(model, grads)
    _, state = nnx.split((model, optimizer))
    return state, loss


def sharding_spec(path, x, embed_on="vocab"):
    """Megatron's, with the tied embedding on its vocabulary (``embed_on="d_model"``
    shards the hidden dimension instead, which the logits projection contracts: SL103)."""
    if embed_on == "d_model" and x.ndim == 2 and "embed" in jax.tree_util.keystr(path):
        return P(None, "model")
    return megatron_spec(path, x)


def step_and_inputs(batch=32, seq=128, mesh_devices=None, embed_on="vocab"):
    """The step, its jit options and its abstract inputs."""
    mesh = data_model_mesh(mesh_devices)
    graphdef, state_shape = nnx.split(nnx.eval_shape(build))
    state = abstract(state_shape, mesh, functools.partial(sharding_spec, embed_on=embed_on))
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return train_step, {"static_argnums": 0}, (graphdef, state, tokens)


def shard_lint_targets(batch=32, seq=128, mesh_devices=None, embed_on="vocab"):
    fn, options, args = step_and_inputs(batch, seq, mesh_devices, embed_on)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
