"""An FSDP x tensor-parallel training step of a decoder-only transformer.

What it shows:
- the parameters are sharded FSDP-style over ``fsdp`` and Megatron-style over
  ``tp``; every layer's weights are all-gathered inside the layer scan, so the
  report lists those all-gathers with a count equal to the number of layers,
  classified as parameter gathers (intended, not warned about); XLA also
  re-lays out activations inside the scan, which SL102 weighs by the trip count;
- the jitted step sets neither ``out_shardings`` nor ``donate_argnums``: XLA
  returns some parameters on another layout than they came in (SL201, with the
  ``out_shardings=`` text to paste) and the old state stays alive beside the new
  one (SL202);
- the token embedding is left replicated (SL203).

    jax-shard-lint lint examples/fsdp_tp_train_step.py
    jax-shard-lint lint examples/fsdp_tp_train_step.py --set layers=24 --device h100
    jax-shard-lint sweep examples/fsdp_tp_train_step.py --mesh 8x1 --mesh 4x2 --mesh 2x4 --mesh 1x8
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def layer(h, w):
    # Attention-free mixer + MLP: enough to give XLA the FSDP/TP collectives of a real block.
    x = jax.nn.rms_norm(h) if hasattr(jax.nn, "rms_norm") else h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)
    mixed = jnp.einsum("bsd,de->bse", x, w["mix"])
    h = h + mixed
    up = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, w["up"]))
    return h + jnp.einsum("bsf,fd->bsd", up, w["down"])


def loss_fn(params, tokens):
    h = params["embed"][tokens]
    h, _ = jax.lax.scan(lambda h, w: (jax.checkpoint(layer)(h, w), None), h, params["layers"])
    logits = jnp.einsum("bsd,vd->bsv", h, params["embed"])
    labels = jnp.roll(tokens, -1, axis=1)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def train_step(params, opt_state, tokens, lr=1e-3):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    # Adam without bias correction, written out so the example needs only JAX.
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt_state["mu"], grads)
    nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt_state["nu"], grads)
    params = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
    return params, {"mu": mu, "nu": nu}, loss


def shard_lint_targets(batch=16, seq=1024, d_model=1024, d_ff=4096, layers=8, vocab=32768, mesh_shape=None,
                       mesh_devices=None):
    # The tool passes the devices it compiles for (virtual CPUs, or an H100 target's),
    # and `sweep --mesh 4x2` passes mesh_shape=(4, 2): (fsdp, tp).
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    n = len(devices)
    if mesh_shape is None:
        tp = 2 if n % 2 == 0 and n > 1 else 1
        mesh_shape = (n // tp, tp)
    mesh = jax.make_mesh(tuple(mesh_shape), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2, devices=devices)

    def spec(shape, pspec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    params = {
        "embed": spec((vocab, d_model), P()),  # left replicated: SL203
        "layers": {
            "mix": spec((layers, d_model, d_model), P(None, "fsdp", "tp")),
            "up": spec((layers, d_model, d_ff), P(None, "fsdp", "tp")),
            "down": spec((layers, d_ff, d_model), P(None, "tp", "fsdp")),
        },
    }
    opt_state = {"mu": params, "nu": params}
    tokens = spec((batch, seq), P("fsdp"), jnp.int32)
    step = jax.jit(train_step)  # no out_shardings, no donation: SL201, SL202
    return {"train_step": step.lower(params, opt_state, tokens)}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
