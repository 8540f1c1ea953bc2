"""A jraph GraphNet train step (flax.linen + optax Adam), written as flax's ogbg_molpcba example writes it: an
embedder (``GraphMapFeatures``), message-passing steps of 2-layer MLPs with ``concatenated_args``, a global
decoder, sigmoid BCE on the graphs' globals. A newcomer's program (issue 46, newbie15 F2), smaller.

Targets on a (data, model) mesh:
  dp_correct: params and Adam state replicated (they are small), the packed graph batch and labels on 'data'
    ('model' splits nothing): XLA spends 'model' on resharding the gathered and concatenated node and edge
    values; the batch on P(('data', 'model')) is the fix;
  tp_mistake: every Dense kernel on its input dimension over 'model' (P('model', None), the plausible mistake),
    the batch on 'data' as above.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import jraph
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from mesh_util import abstract, data_model_mesh

# A packed batch of graphs: node, edge and graph counts (each divisible by 8 devices).
SIZES = {"n_node": 4096, "n_edge": 16384, "n_graph": 128}


class MLP(nn.Module):
    features: tuple

    @nn.compact
    def __call__(self, x):
        for i, f in enumerate(self.features):
            x = nn.Dense(f)(x)
            if i != len(self.features) - 1:
                x = nn.relu(x)
        return x


class GraphNet(nn.Module):
    latent_size: int = 128
    message_passing_steps: int = 2
    output_globals_size: int = 32

    @nn.compact
    def __call__(self, graphs):
        embedder = jraph.GraphMapFeatures(
            embed_node_fn=nn.Dense(self.latent_size),
            embed_edge_fn=nn.Dense(self.latent_size),
            embed_global_fn=nn.Dense(self.latent_size),
        )
        processed = embedder(graphs)
        mlp = (self.latent_size, self.latent_size)
        for _ in range(self.message_passing_steps):
            net = jraph.GraphNetwork(
                update_edge_fn=jraph.concatenated_args(MLP(mlp)),
                update_node_fn=jraph.concatenated_args(MLP(mlp)),
                update_global_fn=jraph.concatenated_args(MLP(mlp)),
            )
            processed = net(processed)
        decoder = jraph.GraphMapFeatures(embed_global_fn=nn.Dense(self.output_globals_size))
        return decoder(processed)


model = GraphNet()
tx = optax.adam(1e-3)


def train_step(params, opt_state, graphs, labels):
    def loss_fn(p):
        pred = model.apply(p, graphs).globals
        return jnp.mean(optax.sigmoid_binary_cross_entropy(pred, labels))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss


def graph_batch(mesh, batch_spec, n_node, n_edge, n_graph):
    """The packed graph batch and its labels, each on ``batch_spec`` (dimension 0)."""
    def sds(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, batch_spec))

    graphs = jraph.GraphsTuple(
        nodes=sds((n_node, 16), jnp.float32), edges=sds((n_edge, 8), jnp.float32),
        senders=sds((n_edge,), jnp.int32), receivers=sds((n_edge,), jnp.int32),
        globals=sds((n_graph, 8), jnp.float32), n_node=sds((n_graph,), jnp.int32), n_edge=sds((n_graph,), jnp.int32))
    return graphs, sds((n_graph, model.output_globals_size), jnp.float32)


def kernel_on_model_input_dim(path, x):
    return P("model", None) if x.ndim == 2 else P()


def replicated(path, x):
    return P()


def step_and_inputs(mesh, spec_for, batch_spec=P("data"), **sizes):
    """(the jitted step, its abstract arguments): the state on ``spec_for``, the batch on ``batch_spec``."""
    graphs, labels = graph_batch(mesh, batch_spec, **{**SIZES, **sizes})
    params_shape = jax.eval_shape(model.init, jax.random.key(0),
                                  jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), graphs))
    params = abstract(params_shape, mesh, spec_for)
    opt_state = abstract(jax.eval_shape(tx.init, params_shape), mesh, spec_for)
    return jax.jit(train_step), (params, opt_state, graphs, labels)


def shard_lint_targets(mesh_devices=None):
    mesh = data_model_mesh(mesh_devices)
    out = {}
    for name, spec_for in (("dp_correct", replicated), ("tp_mistake", kernel_on_model_input_dim)):
        step, args = step_and_inputs(mesh, spec_for)
        out[name] = step.lower(*args)
    return out
