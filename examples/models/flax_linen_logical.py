"""A Flax linen MLP whose parameters carry logical axis names (``nn.with_logical_partitioning``),
mapped to a 3-axis mesh (data, fsdp, tp) by logical axis rules, as MaxText and T5X do.

The rules put the hidden ('mlp') dimension on fsdp and leave 'embed' on tp: every weight
is split, but the wrong way round for the batch the activations carry. ``suggest`` says which
rule to change (``shard_lint_logical_axes`` exposes the names and the rules)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

RULES = (("batch", ("data", "fsdp")), ("embed", "tp"), ("mlp", "fsdp"), ("vocab", None))


class Mlp(nn.Module):
    d_model: int = 512
    d_ff: int = 2048
    vocab: int = 4096

    @nn.compact
    def __call__(self, tokens):
        init = nn.initializers.normal(0.02)
        embed = self.param("embed", nn.with_logical_partitioning(init, ("vocab", "embed")), (self.vocab, self.d_model))
        h = embed[tokens]
        for i in range(2):
            up = self.param(f"up_{i}", nn.with_logical_partitioning(init, ("embed", "mlp")), (self.d_model, self.d_ff))
            down = self.param(f"down_{i}", nn.with_logical_partitioning(init, ("mlp", "embed")),
                              (self.d_ff, self.d_model))
            h = h + jax.nn.gelu(h @ up) @ down
        return h @ embed.T


def loss_fn(params, tokens):
    logits = Mlp().apply({"params": params}, tokens)
    labels = jax.nn.one_hot(jnp.roll(tokens, -1, axis=1), logits.shape[-1])
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


def train_step(params, tokens):
    grads = jax.grad(loss_fn)(params, tokens)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def _mesh(mesh_devices=None):
    devices = (mesh_devices if mesh_devices is not None else jax.devices())[:8]
    return jax.make_mesh((2, 2, 2), ("data", "fsdp", "tp"), axis_types=(AxisType.Auto,) * 3, devices=devices)


def _logical_params(batch, seq):
    variables = jax.eval_shape(Mlp().init, jax.random.key(0), jnp.zeros((batch, seq), jnp.int32))
    return variables["params"]


def shard_lint_logical_axes(batch=16, seq=128):
    """The logical names of the step's arguments and the rules that map them to the mesh."""
    return {"rules": RULES, "arguments": {"params": nn.get_partition_spec(_logical_params(batch, seq)),
                                          "tokens": P("batch", None)}}


def shard_lint_targets(batch=16, seq=128, mesh_devices=None):
    mesh = _mesh(mesh_devices)
    boxed = _logical_params(batch, seq)
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, RULES)
    params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), nn.unbox(boxed), shardings)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32,
                                  sharding=NamedSharding(mesh, nn.logical_to_mesh_axes(P("batch", None), RULES)))
    return {"train_step": jax.jit(train_step).lower(params, tokens)}
