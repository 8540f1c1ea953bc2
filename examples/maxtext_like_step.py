"""A training step laid out the way MaxText lays out its decoder.

MaxText scans a stack of decoder layers whose weights are stored stacked with
the layer axis *second* (``param_scan_axis=1``: ``(embed, layers, mlp)``), shards
every weight over ``fsdp`` (each layer's slice is all-gathered inside the scan
and its gradient reduced back), and feeds a batch dictionary with
leaves the step never reads (``targets_position``: ``jit`` prunes it). On a TPU
target the attention scores go through a Pallas kernel, a TPU custom call, as
MaxText's default attention does.

    jax-shard-lint lint examples/maxtext_like_step.py --platform tpu-v5e --devices 8
    # over a v5e's 16 GiB: the compiler refuses it, reported as SL301 with its figures
    jax-shard-lint lint examples/maxtext_like_step.py --platform tpu-v5e --devices 8 \
        --set d_model=8192 --set d_ff=32768 --set layers=32
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


HEAD_DIM = 128


def attention(q, k, v, mesh):
    """Causal attention over (batch, heads, seq, head_dim): MaxText's default on TPU is a Pallas splash
    kernel (a ``tpu_custom_call``) run per device under ``shard_map``; elsewhere plain dot products."""
    if mesh.devices.flat[0].platform == "tpu":
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

        heads, seq = q.shape[1], q.shape[2]
        kernel = splash.make_splash_mha(masks.MultiHeadMask([masks.CausalMask((seq, seq))] * heads),
                                        head_shards=1, q_seq_shards=1)
        return jax.shard_map(jax.vmap(kernel), mesh=mesh, in_specs=P("fsdp"), out_specs=P("fsdp"),
                             check_vma=False)(q, k, v)
    seq = q.shape[2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def decoder_layer(h, w, mesh):
    # MaxText pins every activation to its logical sharding (batch over fsdp): the weights are gathered.
    batch_sharded = lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("fsdp")))  # noqa: E731
    b, s, d = h.shape
    heads = lambda x: batch_sharded(x.reshape(b, s, d // HEAD_DIM, HEAD_DIM).transpose(0, 2, 1, 3))  # noqa: E731
    q, k, v = heads(h @ w["wq"] / HEAD_DIM**0.5), heads(h @ w["wk"]), heads(h @ w["wv"])
    h = batch_sharded(h + attention(q, k, v, mesh).transpose(0, 2, 1, 3).reshape(b, s, d) @ w["wo"])
    return batch_sharded(h + batch_sharded(jax.nn.gelu(h @ w["wi"])) @ w["wmlp_out"])


def loss_fn(params, batch, mesh):
    h = params["embedding"][batch["inputs"]]
    # The scan carries h; the stacked weights are sliced along their second axis (the layer axis).
    layers = jax.tree.map(lambda w: jnp.moveaxis(w, 1, 0), params["decoder"])
    h, _ = jax.lax.scan(lambda h, w: (jax.checkpoint(decoder_layer, static_argnums=2)(h, w, mesh), None), h, layers)
    logits = h @ params["embedding"].T
    labels = jax.nn.one_hot(batch["targets"], logits.shape[-1], dtype=logits.dtype)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


def train_step(params, batch, mesh, lr=1e-3):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, mesh)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_lint_targets(batch=8, seq=512, d_model=1024, d_ff=4096, layers=4, vocab=8192, mesh_devices=None):
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    mesh = jax.make_mesh((len(devices),), ("fsdp",), axis_types=(AxisType.Auto,), devices=devices)

    def spec(shape, pspec, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    stacked = lambda a, b: spec((a, layers, b), P("fsdp", None, None))  # noqa: E731 - MaxText's (embed, layers, x)
    params = {
        "embedding": spec((vocab, d_model), P(None, "fsdp")),
        "decoder": {
            "wq": stacked(d_model, d_model), "wk": stacked(d_model, d_model), "wv": stacked(d_model, d_model),
            "wo": stacked(d_model, d_model), "wi": stacked(d_model, d_ff),
            "wmlp_out": spec((d_ff, layers, d_model), P("fsdp", None, None)),
        },
    }
    tokens = spec((batch, seq), P("fsdp"), jnp.int32)
    batch_tree = {"inputs": tokens, "targets": tokens, "targets_position": tokens}  # the step never reads positions
    shardings = jax.tree.map(lambda s: s.sharding, params)
    step = jax.jit(functools.partial(train_step, mesh=mesh), out_shardings=(shardings, NamedSharding(mesh, P())), donate_argnums=(0,))
    return {"train_step": step.lower(params, batch_tree)}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
