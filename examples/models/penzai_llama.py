"""A penzai Llama (penzai.models.transformer) trained with optax AdamW, its
parameters sharded by axis name with penzai's own sharding_util."""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P
from penzai import pz
from penzai.models.transformer.variants import llamalike_common
from penzai.toolshed import sharding_util

from mesh_util import data_model_mesh

CONFIG = llamalike_common.LlamalikeTransformerConfig(
    num_kv_heads=4, query_head_multiplier=1, embedding_dim=256, projection_dim=64, mlp_hidden_dim=1024,
    num_decoder_blocks=2, vocab_size=8192, mlp_variant="swiglu", tie_embedder_and_logits=False,
)
# Megatron-style: attention heads, MLP neurons and the vocabulary on the model axis.
AXES_TO_MESH = {"heads": "model", "neurons": "model", "vocabulary": "model"}

optimizer = optax.adamw(1e-3)


def build(init_base_rng=None):
    return llamalike_common.build_llamalike_transformer(CONFIG, init_base_rng=init_base_rng)


def make_train_step(model_slots):
    def loss_fn(params, tokens):
        model = pz.bind_variables(model_slots, params)
        logits = model(pz.nx.wrap(tokens).tag("batch", "seq"))
        raw = logits.unwrap("batch", "seq", "vocabulary")
        return optax.softmax_cross_entropy_with_integer_labels(raw, jnp.roll(tokens, -1, axis=1)).mean()

    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def step_and_inputs(batch=16, seq=128, embed_on=None, mesh_devices=None):
    """The step, its jit options and its abstract inputs. ``embed_on=embedding``
    shards every weight on its embedding axis instead (the logits projection then
    contracts a sharded axis)."""
    mesh = data_model_mesh(mesh_devices)
    axes = {"embedding": "model"} if embed_on == "embedding" else AXES_TO_MESH
    # The parameters' shapes without initialising them; the model itself holds slots.
    params_shape = jax.eval_shape(lambda: pz.unbind_params(build(jax.random.key(0)), freeze=True)[1])
    params = sharding_util.name_to_name_sharding(params_shape, mesh, axes, as_shape_dtype_struct=True)
    opt_state = sharding_util.name_to_name_sharding(jax.eval_shape(optimizer.init, params_shape), mesh, axes,
                                                    ignore_unnamed_arrays=True, as_shape_dtype_struct=True)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return make_train_step(build()), {}, (params, opt_state, tokens)


def shard_lint_targets(batch=16, seq=128, embed_on=None, mesh_devices=None):
    fn, options, args = step_and_inputs(batch, seq, embed_on, mesh_devices)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
