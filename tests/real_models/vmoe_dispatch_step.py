"""A sparse Mixture-of-Experts training step written as google-research/vmoe writes its dispatch
(vmoe/moe.py: Top-Experts-Per-Item routing, the einsum dispatcher, ``_dispatch``/``_receive``: the
all-to-all stated as two ``with_sharding_constraint``s around a reshape and a swap of axes), with an
optax Adam step, on a data=2 x expert=4 mesh. Adapted as plain JAX functions by a new user of the tool
(issue 46: programs nobody here wrote).

Layouts: ``expert_parallel`` (experts on 'expert', groups on (expert, data), out_shardings, donation) and
``dmodel_sharded`` (the mistake: the expert weights' d_model on 'expert' instead of their expert dim, no
out_shardings, no donation)."""

import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

K = 2
CAPACITY_FACTOR = 1.25
OPT = optax.adam(1e-3)
PARAM_SPECS = {
    "expert_parallel": {"router": P(), "wi": P("expert"), "wo": P("expert")},
    "dmodel_sharded": {"router": P(), "wi": P(None, "expert"), "wo": P(None, None, "expert")},
}


def compute_capacity(num_tokens, num_experts, capacity_factor, multiple_of=4):
    capacity = int(math.ceil(num_tokens * capacity_factor / num_experts))
    return capacity + (-capacity) % multiple_of


def top_experts_per_item(gates, num_selected_experts, capacity):
    """vmoe's _get_top_experts_per_item_common and einsum dispatcher, without batch priority."""
    group_size, num_experts = gates.shape
    _, expert_index = jax.lax.top_k(gates, num_selected_experts)
    expert_index = jnp.swapaxes(expert_index, 0, 1).ravel()
    expert_one_hot = jax.nn.one_hot(expert_index, num_experts, dtype=jnp.int32)
    buffer_index = jnp.cumsum(expert_one_hot, axis=0) * expert_one_hot - 1
    buffer_index = jnp.swapaxes(buffer_index.reshape(-1, group_size, num_experts), 0, 1)
    dispatch_weights = jax.nn.one_hot(jnp.max(buffer_index, axis=1), capacity, dtype=jnp.bool_)
    return dispatch_weights, jnp.einsum("SE,SEC->SEC", gates, dispatch_weights)


def dispatch(data, spec):
    """vmoe's _dispatch: (G, E, C, D) -> (E, G*C, D)."""
    num_groups, num_experts, capacity, *item_shape = data.shape
    data = jax.lax.with_sharding_constraint(data, spec)
    data = data.reshape(num_experts, -1, num_experts, capacity, *item_shape)
    data = jnp.swapaxes(data, 0, 2)
    data = data.reshape(-1, *item_shape)
    data = jax.lax.with_sharding_constraint(data, spec)
    return data.reshape(num_experts, num_groups * capacity, *item_shape)


def receive(data, num_groups, spec):
    """vmoe's _receive: (E, G*C, D) -> (G, E, C, D)."""
    num_experts, num_groups_times_capacity, *item_shape = data.shape
    capacity = num_groups_times_capacity // num_groups
    data = data.reshape(num_experts * num_groups, capacity, *item_shape)
    data = jax.lax.with_sharding_constraint(data, spec)
    data = data.reshape(num_experts, -1, num_experts, capacity, *item_shape)
    data = jnp.swapaxes(data, 0, 2)
    data = data.reshape(num_groups, num_experts, capacity, *item_shape)
    return jax.lax.with_sharding_constraint(data, spec)


def loss_fn(params, x, target, spec):
    groups, group_size, _ = x.shape
    num_experts = params["router"].shape[-1]
    capacity = compute_capacity(group_size * K, num_experts, CAPACITY_FACTOR)
    gates = jax.nn.softmax(jnp.einsum("GSD,DE->GSE", x, params["router"]), axis=-1)
    dispatch_weights, combine_weights = jax.vmap(lambda g: top_experts_per_item(g, K, capacity))(gates)
    data = dispatch(jnp.einsum("GSEC,GSD->GECD", dispatch_weights, x), spec)
    hidden = jax.nn.gelu(jnp.einsum("EnD,EDH->EnH", data, params["wi"]))
    out = receive(jnp.einsum("EnH,EHD->EnD", hidden, params["wo"]), groups, spec)
    y = jnp.einsum("GSEC,GECD->GSD", combine_weights, out)
    density = jnp.mean(dispatch_weights.any(-1).astype(jnp.float32), axis=1)
    aux = jnp.mean(density * jnp.mean(gates, axis=1)) * num_experts**2
    return jnp.mean((y - target) ** 2) + 0.01 * aux


def make_train_step(spec):
    def train_step(params, opt_state, x, target):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, target, spec)
        updates, opt_state = OPT.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return train_step


def abstract_inputs(mesh, layout, groups, group_size, d_model, hidden, experts):
    specs = PARAM_SPECS[layout]
    shapes = {"router": (d_model, experts), "wi": (experts, d_model, hidden), "wo": (experts, hidden, d_model)}

    def place(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    params = {k: place(shapes[k], jnp.float32, specs[k]) for k in shapes}
    (adam, *rest) = jax.eval_shape(OPT.init, params)
    opt_state = (adam._replace(count=place(adam.count.shape, adam.count.dtype, P()),
                               mu={k: place(shapes[k], jnp.float32, specs[k]) for k in shapes},
                               nu={k: place(shapes[k], jnp.float32, specs[k]) for k in shapes}), *rest)
    tokens = P(("expert", "data"))
    x = place((groups, group_size, d_model), jnp.float32, tokens)
    return params, opt_state, x, place(x.shape, x.dtype, tokens)


def lower(layout, mesh_devices=None, groups=8, group_size=512, d_model=256, hidden=1024, experts=4):
    mesh = jax.make_mesh((2, 4), ("data", "expert"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    params, opt_state, x, target = abstract_inputs(mesh, layout, groups, group_size, d_model, hidden, experts)
    # Groups expert-major over all devices: after the all-to-all, experts on 'expert', their buffers on 'data'.
    step = make_train_step(NamedSharding(mesh, P(("expert", "data"))))
    if layout == "expert_parallel":
        shardings = jax.tree.map(lambda s: s.sharding, (params, opt_state))
        jitted = jax.jit(step, out_shardings=(*shardings, NamedSharding(mesh, P())), donate_argnums=(0, 1))
    else:
        jitted = jax.jit(step)
    return jitted.lower(params, opt_state, x, target)


def shard_lint_targets(layout="expert_parallel", group_size=512, mesh_devices=None):
    return {layout: lower(layout, mesh_devices, group_size=group_size)}
