"""A GPT-2 language model from transformers (its Flax implementation) trained
with optax AdamW; parameters are built on abstract inputs, nothing is downloaded.

    jax-shard-lint lint examples/models/gpt2_flax.py --set embed_on=d_model   # SL103
    jax-shard-lint lint examples/models/gpt2_flax.py --set layers=12 --set layout=features \
        --threshold replicating-collective-bytes=1MiB   # SL101, once for all 12 layers

transformers' Conv1D kernels are (output features, input features).
"""

import functools

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P
from transformers import GPT2Config, FlaxGPT2LMHeadModel

from mesh_util import abstract, data_model_mesh


def gpt2_spec(path, x, embed_on="vocab", layout="default"):
    """``layout="default"``: c_attn/c_fc on dimension 1 (input features) and c_proj on dimension 0 on
    'model'; ``layout="features"``: every projection on its output features, c_proj
    too, so each layer gathers its MLP activation before c_proj (SL101). The token
    embedding on the vocab (``embed_on="d_model"`` shards its hidden dimension
    instead, which the tied logits projection contracts: SL103)."""
    name = jax.tree_util.keystr(path)
    if x.ndim == 2 and ("c_attn" in name or "c_fc" in name):
        return P("model", None) if layout == "features" else P(None, "model")
    if x.ndim == 2 and "c_proj" in name:
        return P("model", None)
    if x.ndim == 2 and "wte" in name:
        return P("model", None) if embed_on == "vocab" else P(None, "model")
    return P()


def make(layers=2, d_model=256, heads=4, vocab=8192, seq=128):
    config = GPT2Config(n_layer=layers, n_embd=d_model, n_head=heads, vocab_size=vocab, n_positions=seq)
    return FlaxGPT2LMHeadModel(config, input_shape=(1, seq), _do_init=False)


optimizer = optax.adamw(1e-3)


def train_step(model, params, opt_state, tokens):
    def loss_fn(p):
        logits = model(tokens, params=p, train=False).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def step_and_inputs(batch=16, seq=128, mesh_devices=None, embed_on="vocab", layers=2, layout="default"):
    """The step, its jit options and its abstract inputs."""
    mesh = data_model_mesh(mesh_devices)
    model = make(layers=layers, seq=seq)
    params_shape = jax.eval_shape(lambda key: model.init_weights(key, (1, seq)), jax.random.key(0))
    spec = functools.partial(gpt2_spec, embed_on=embed_on, layout=layout)
    params = abstract(params_shape, mesh, spec)
    opt_state = abstract(jax.eval_shape(optimizer.init, params_shape), mesh, spec)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return (lambda params, opt_state, tokens: train_step(model, params, opt_state, tokens)), {}, (
        params, opt_state, tokens)


def shard_lint_targets(batch=16, seq=128, mesh_devices=None, embed_on="vocab", layers=2, layout="default"):
    fn, options, args = step_and_inputs(batch, seq, mesh_devices, embed_on, layers, layout)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
