"""A BERT masked-LM training step from transformers (its Flax ``FlaxBertForMaskedLM``, whose decoder is
the word embedding, tied) with optax AdamW, as a new user wrote it (issue #46); parameters are built on
abstract inputs, nothing is downloaded.

    jax-shard-lint lint examples/models/bert_mlm_flax.py                     # the new user's layout
    jax-shard-lint lint examples/models/bert_mlm_flax.py --set layout=megatron

``layout="naive"`` (the default) is the new user's: the 30522 x hidden word embedding replicated (30522 is
BERT's vocabulary, which 'data' (4) does not divide), query, key and value kernels and the intermediate
kernel sharded on the features they contract, each layer's output kernel on the features it produces; no
out_shardings and no donation. The step then returns the embedding, its Adam moments and 66 small state
values on other layouts than it takes them (SL201), all-reduces the partial sums of the whole logits
(SL103: the tied decoder contracts the hidden dimension the layers return split), and donating the state
reuses nothing until the state comes back on its inputs' layouts (SL202). ``layout="megatron"``: the
embedding on its vocabulary, the column and row halves of each layer, the state pinned and donated.
flax's Dense kernels are (input features, output features).
"""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from mesh_util import abstract, data_model_mesh
from transformers import BertConfig, FlaxBertForMaskedLM

VOCAB = 30522


def bert_spec(path, x, layout="naive"):
    """Each parameter's (and its Adam moments') PartitionSpec in the two layouts."""
    name = "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)
    if x.ndim == 0:
        return P()
    kernel = name.endswith("kernel")
    if layout == "megatron":
        if "word_embeddings" in name:
            return P("model", None)
        if "predictions/bias" in name:
            return P("model")
        if any(n in name for n in ("self/query", "self/key", "self/value", "intermediate/dense")):
            return P(None, "model") if kernel else P("model")
        if "output/dense" in name and kernel:
            return P("model", None)
        return P()
    if any(n in name for n in ("self/query", "self/key", "self/value")):
        return P("model", None) if kernel else P()
    if "intermediate/dense" in name and kernel:
        return P("model", None)
    if "/output/dense" in name and kernel and "attention" not in name:
        return P(None, "model")
    return P()


def train_step(model, tx, params, opt_state, batch):
    def loss_fn(p):
        logits = model(batch["input_ids"], batch["attention_mask"], params=p, train=False).logits
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
        weights = batch["mlm_weights"]
        return jnp.sum(ce * weights) / jnp.maximum(jnp.sum(weights), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def step_and_inputs(batch=32, seq=128, layers=2, mesh_devices=None, layout="naive"):
    """The step, its jit options and its abstract inputs."""
    mesh = data_model_mesh(mesh_devices)
    config = BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=512)
    model = FlaxBertForMaskedLM(config, _do_init=False)
    tx = optax.adamw(1e-4, weight_decay=0.01)
    params_shape = jax.eval_shape(lambda key: model.init_weights(key, (1, seq)), jax.random.PRNGKey(0))
    params = abstract(params_shape, mesh, lambda path, x: bert_spec(path, x, layout))
    opt_state = abstract(jax.eval_shape(tx.init, params_shape), mesh, lambda path, x: bert_spec(path, x, layout))
    rows = NamedSharding(mesh, P("data", None))
    batch_inputs = {k: jax.ShapeDtypeStruct((batch, seq), dtype, sharding=rows) for k, dtype in (
        ("input_ids", jnp.int32), ("attention_mask", jnp.int32), ("labels", jnp.int32),
        ("mlm_weights", jnp.float32))}
    options = {}
    if layout == "megatron":
        state = jax.tree.map(lambda x: x.sharding, (params, opt_state))
        options = {"out_shardings": (*state, NamedSharding(mesh, P())), "donate_argnums": (0, 1)}
    return (lambda params, opt_state, batch: train_step(model, tx, params, opt_state, batch)), options, (
        params, opt_state, batch_inputs)


def shard_lint_targets(batch=32, seq=128, layers=2, mesh_devices=None, layout="naive"):
    fn, options, args = step_and_inputs(batch, seq, layers, mesh_devices, layout)
    return {"train_step": jax.jit(fn, **options).lower(*args)}
