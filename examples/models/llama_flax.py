"""A Llama from transformers (its Flax implementation: RoPE, a causal mask, grouped-query attention
and a SwiGLU MLP) trained with optax AdamW; parameters are built on abstract inputs, nothing is
downloaded.

    jax-shard-lint lint examples/models/llama_flax.py                        # Megatron's layout
    jax-shard-lint lint examples/models/llama_flax.py --set layout=fsdp      # column halves also on data
    jax-shard-lint lint examples/models/llama_flax.py --set o_proj=output    # the mistake: o_proj column-split

The layout is Megatron's: q, k, v, gate and up column-parallel (their kernels sharded on the features
they produce, the heads and the MLP neurons), o_proj and down_proj row-parallel (sharded on the
features they contract), so each layer's attention and MLP end in one all-reduce of the residual
stream over 'model'; the batch on 'data'. flax's Dense kernels are (input features, output features).
"""

import functools

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P
from transformers import FlaxLlamaForCausalLM, LlamaConfig

from mesh_util import abstract, data_model_mesh

COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW = ("o_proj", "down_proj")


def llama_spec(path, x, layout="megatron", o_proj="input"):
    """``layout="megatron"``: the column halves P(None, 'model'), the row halves P('model', None);
    ``layout="fsdp"``: the column halves P('data', 'model') (their input features also split over the
    batch's axis, gathered before use). ``o_proj="output"`` is the mistake: o_proj sharded on the
    features it produces, P(None, 'model'), as if it were a column half. Embedding and lm_head are
    sharded on the vocabulary; norms replicated."""
    name = jax.tree_util.keystr(path)
    if x.ndim != 2:
        return P()
    if any(n in name for n in COLUMN):
        return P("data", "model") if layout == "fsdp" else P(None, "model")
    if "o_proj" in name and o_proj == "output":
        return P(None, "model")
    if any(n in name for n in ROW):
        return P("model", None)
    if "embed_tokens" in name:
        return P("model", None)  # (vocab, hidden)
    if "lm_head" in name:
        return P(None, "model")  # (hidden, vocab)
    return P()


def make(layers=2, hidden=256, heads=8, kv_heads=2, vocab=32000, seq=128):
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                         max_position_embeddings=seq, tie_word_embeddings=False)
    return FlaxLlamaForCausalLM(config, input_shape=(1, seq), _do_init=False)


optimizer = optax.adamw(1e-3)


def train_step(model, params, opt_state, tokens):
    def loss_fn(p):
        logits = model(tokens, params=p, train=False).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def step_and_inputs(batch=128, seq=128, mesh_devices=None, layers=2, vocab=32000, layout="megatron",
                    o_proj="input"):
    """The step, its jit options and its abstract inputs (the issue's configuration by default)."""
    mesh = data_model_mesh(mesh_devices)
    model = make(layers=layers, vocab=vocab, seq=seq)
    params_shape = jax.eval_shape(lambda key: model.init_weights(key, (1, seq)), jax.random.key(0))
    spec = functools.partial(llama_spec, layout=layout, o_proj=o_proj)
    params = abstract(params_shape, mesh, spec)
    opt_state = abstract(jax.eval_shape(optimizer.init, params_shape), mesh, spec)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    return (lambda params, opt_state, tokens: train_step(model, params, opt_state, tokens)), {}, (
        params, opt_state, tokens)


def shard_lint_targets(batch=128, seq=128, mesh_devices=None, layers=2, vocab=32000, layout="megatron",
                       o_proj="input"):
    fn, options, args = step_and_inputs(batch, seq, mesh_devices, layers, vocab, layout, o_proj)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
