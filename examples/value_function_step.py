"""A backward-induction (value function) step, sharded two ways.

``V[s, g]`` holds the value of discrete state ``s`` at continuous grid point
``g``. One step interpolates the next-period value along the continuous grid at
each state's savings choices (``jnp.interp`` is a gather along the grid axis),
then takes the best choice. The step maps ``V_next -> V`` with the same shape.

Two targets:
- ``sharded_on_grid`` shards the grid axis the interpolation reads: each device
  reads its own shard and XLA all-reduces the masked partial results, the whole
  f32[256, 524288] (2.0 GiB) on every device (SL101: the all-reduce materialises
  it), and the peak grows with the whole array rather than its shard;
- ``sharded_on_states`` shards the discrete axis: each device interpolates its
  own states and no collective is needed.

    jax-shard-lint lint examples/value_function_step.py
    jax-shard-lint lint examples/value_function_step.py --target sharded_on_states
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

BETA = 0.96


def bellman_step(v_next, grid, income, choices):
    """One backward-induction step: V(s, a) = max_c u(c) + beta * V_next(s, a')."""

    def per_state(v_row, y):
        cash = grid[:, None] + y                        # [grid, 1]
        savings = choices[None, :] * cash               # [grid, choice]
        cons = jnp.maximum(cash - savings, 1e-6)
        cont = jnp.interp(savings.ravel(), grid, v_row).reshape(savings.shape)
        return jnp.max(jnp.log(cons) + BETA * cont, axis=1)

    return jax.vmap(per_state)(v_next, income)


def shard_lint_targets(states=256, grid_points=16384, n_choices=32, mesh_devices=None):
    # The tool passes the devices it compiles for (virtual CPUs, or an H100 target's).
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), ("x",), axis_types=(AxisType.Auto,), devices=devices)
    f32 = jnp.float32

    def spec(shape, pspec):
        return jax.ShapeDtypeStruct(shape, f32, sharding=NamedSharding(mesh, pspec))

    grid = spec((grid_points,), P())
    choices = spec((n_choices,), P())
    step = jax.jit(bellman_step)
    return {
        "sharded_on_grid": step.lower(spec((states, grid_points), P(None, "x")), grid,
                                      spec((states,), P()), choices),
        "sharded_on_states": step.lower(spec((states, grid_points), P("x", None)), grid,
                                        spec((states,), P("x")), choices),
    }


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
