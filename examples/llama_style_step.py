"""A llama-style training step laid out the way MaxText's llama2 config lays it out (fsdp only).

Token embedding ``(vocab, embed)`` and a separate logits projection ``(embed, vocab)``, both sharded
over ``fsdp`` on ``embed``; a scan over decoder layers (RMSNorm, rotary-free attention, SwiGLU MLP)
whose weights are stored stacked with the layer axis second (``(embed, layers, ...)``), each layer's
slice gathered inside the scan; the batch over ``fsdp``. With ``scan=False`` the layers are unrolled.

At vocab 32000 the TPU compiler splits the logits weight's all-gather into an async collective fusion
(start, continuations and done, each a clone of the one gather): the program the collective counts of
issue 47 were measured on.

    jax-shard-lint lint examples/llama_style_step.py --platform tpu-v5e --devices 8
    jax-shard-lint lint examples/llama_style_step.py --platform h100 --devices 8 --set emb=1024
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

HEAD_DIM = 64


def rms_norm(x, scale):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype) * scale


def decoder_layer(h, w, mesh):
    batch_sharded = lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("fsdp")))  # noqa: E731
    b, s, d = h.shape
    x = rms_norm(h, w["pre_norm"])
    q = jnp.einsum("bsd,dhk->bhsk", x, w["query"]) / HEAD_DIM**0.5
    k, v = jnp.einsum("bsd,dhk->bhsk", x, w["key"]), jnp.einsum("bsd,dhk->bhsk", x, w["value"])
    scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), jnp.einsum("bhqk,bhsk->bhqs", q, k), -1e9)
    attended = jnp.einsum("bhqs,bhsk->bhqk", jax.nn.softmax(scores.astype(jnp.float32), -1).astype(v.dtype), v)
    h = batch_sharded(h + jnp.einsum("bhsk,hkd->bsd", attended, w["out"]))
    x = rms_norm(h, w["post_norm"])
    gated = batch_sharded(jax.nn.silu(x @ w["wi_0"]) * (x @ w["wi_1"]))
    return batch_sharded(h + gated @ w["wo"])


def loss_fn(params, batch, mesh, scan):
    h = params["token_embedder"][batch["inputs"]]
    layers = jax.tree.map(lambda w: jnp.moveaxis(w, 1, 0), params["decoder"])
    layer = jax.checkpoint(decoder_layer, static_argnums=2)
    if scan:
        h, _ = jax.lax.scan(lambda h, w: (layer(h, w, mesh), None), h, layers)
    else:
        for i in range(jax.tree.leaves(layers)[0].shape[0]):
            h = layer(h, jax.tree.map(lambda w: w[i], layers), mesh)  # noqa: B023 - used at once
    logits = (rms_norm(h, params["final_norm"]) @ params["logits_dense"]).astype(jnp.float32)
    labels = jax.nn.one_hot(batch["targets"], logits.shape[-1], dtype=logits.dtype)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


def train_step(params, batch, mesh, scan, lr=1e-3):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, mesh, scan)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_lint_targets(batch=8, seq=256, emb=512, mlp=1408, layers=2, vocab=32000, scan=True, mesh_devices=None):
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    mesh = jax.make_mesh((len(devices),), ("fsdp",), axis_types=(AxisType.Auto,), devices=devices)

    def spec(shape, pspec, dtype=jnp.bfloat16):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    heads = emb // HEAD_DIM
    fsdp_first = lambda *shape: spec(shape, P("fsdp", *[None] * (len(shape) - 1)))  # noqa: E731
    params = {
        "token_embedder": spec((vocab, emb), P(None, "fsdp")),
        "logits_dense": fsdp_first(emb, vocab),
        "final_norm": spec((emb,), P()),
        "decoder": {  # MaxText's param_scan_axis=1: (embed, layers, ...)
            "pre_norm": spec((emb, layers), P()), "post_norm": spec((emb, layers), P()),
            "query": fsdp_first(emb, layers, heads, HEAD_DIM), "key": fsdp_first(emb, layers, heads, HEAD_DIM),
            "value": fsdp_first(emb, layers, heads, HEAD_DIM),
            "out": spec((heads, layers, HEAD_DIM, emb), P(None, None, None, "fsdp")),
            "wi_0": fsdp_first(emb, layers, mlp), "wi_1": fsdp_first(emb, layers, mlp),
            "wo": fsdp_first(mlp, layers, emb),
        },
    }
    tokens = spec((batch, seq), P("fsdp"), jnp.int32)
    shardings = jax.tree.map(lambda s: s.sharding, params)
    step = jax.jit(functools.partial(train_step, mesh=mesh, scan=bool(scan)),
                   out_shardings=(shardings, NamedSharding(mesh, P())), donate_argnums=(0,))
    return {"train_step": step.lower(params, {"inputs": tokens, "targets": tokens})}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
