"""pylcm's backward-induction grid-search kernel, with its value array sharded two ways.

Written after the default solver of the public economics library pylcm
(github.com/OpenSourceEconomics/pylcm, Apache-2.0): ``GridSearch`` jits
``get_max_Q_over_a`` (src/_lcm/regime_building/max_Q_over_a.py) and calls it
with keyword arguments only: each state's grid, each action's grid, the next
period's value arrays as a dict ``next_regime_to_V_arr`` keyed by regime, the
regime's flat parameters, ``period`` and ``age``
(src/_lcm/solution/grid_search.py). The body evaluates Q(x, a) = u(x, a) +
beta * V_next(x') on the action grid, masks infeasible actions and maximises;
the states are mapped over by nested vmaps (``productmap``,
src/_lcm/utils/dispatchers.py); the fixed discrete state ``pref_type`` is
co-mapped with the leading axis of the value array (``co_map_state_names``),
so each preference type reads its own row; V_next is read by pylcm's linear
``map_coordinates`` (src/_lcm/regime_building/ndimage.py) at the coordinate
of a linearly spaced grid (src/_lcm/grids/coordinates.py). pylcm needs
Python >= 3.14, so the kernel is restated here rather than imported; only the
model (a CRRA consumer with a preference type) is ours.

Two targets, on one mesh axis ``d`` (pylcm names its mesh axis after the
distributed state; one name lets ``suggest`` move it):
- ``V_on_wealth``: V and the wealth grid sharded on wealth, the continuous
  axis the interpolation reads. Every device interpolates at wealth points
  any device may hold, so XLA all-gathers V (2 MiB).
- ``V_on_pref_type``: V and the preference-type grid sharded on the discrete
  axis: each device reads only its own rows; no collective. This is the
  layout pylcm's maintainers moved to by hand after a production run on the
  wealth layout was 2.8x slower.

    jax-shard-lint suggest examples/lcm_grid_search_kernel.py --target V_on_wealth
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

WEALTH_START, WEALTH_STOP = 0.1, 100.0


def map_coordinates(values, coordinate):
    """pylcm's linear map_coordinates on one axis: clipped lower index, two corners."""
    lower = jnp.clip(jnp.floor(coordinate), 0, values.shape[0] - 2).astype(jnp.int32)
    upper_weight = coordinate - lower
    return (1 - upper_weight) * values[lower] + upper_weight * values[lower + 1]


def linspace_coordinate(value, n_points):
    """pylcm's get_linspace_coordinate: the fractional index of value on the grid."""
    step_length = (WEALTH_STOP - WEALTH_START) / (n_points - 1)
    return (value - WEALTH_START) / step_length


def Q_and_F(consumption, wealth, pref_type, V_row, discount_factor, interest_rate, risk_aversion):
    """Q and feasibility of one state-action pair; V_row is the co-mapped type's row."""
    gamma = risk_aversion[pref_type]
    utility = (consumption ** (1 - gamma) - 1) / (1 - gamma)
    next_wealth = (1 + interest_rate) * (wealth - consumption)
    continuation = map_coordinates(V_row, linspace_coordinate(next_wealth, V_row.shape[0]))
    return utility + discount_factor * continuation, consumption <= wealth


def max_Q_over_a(*, wealth, pref_type, consumption, next_regime_to_V_arr, discount_factor,
                 interest_rate, risk_aversion, period, age):
    """V(x) = max_a Q(x, a), on the product of the state grids (pylcm's core)."""
    del period, age  # pylcm passes them to every core; this model's functions do not read them

    def per_state(w, t, V_row):
        over_actions = jax.vmap(Q_and_F, in_axes=(0, None, None, None, None, None, None))
        Q, F = over_actions(consumption, w, t, V_row, discount_factor, interest_rate, risk_aversion)
        return Q.max(where=F, initial=-jnp.inf)

    # productmap over the inner state (wealth), then the co-map of pref_type with V's leading axis.
    over_wealth = jax.vmap(per_state, in_axes=(0, None, None))
    co_mapped = jax.vmap(over_wealth, in_axes=(None, 0, 0))
    return co_mapped(wealth, pref_type, next_regime_to_V_arr["working"])


def shard_lint_targets(n_pref_types=8, n_wealth=65536, n_consumption=64, mesh_devices=None):
    devices = mesh_devices if mesh_devices is not None else jax.devices()
    mesh = jax.make_mesh((len(devices),), ("d",), axis_types=(AxisType.Auto,), devices=devices)

    def spec(shape, pspec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, pspec))

    def kernel_arguments(V, wealth, pref_type):
        # GridSearch's build_lower_args: states, actions, V arrays, flat params, period, age.
        return dict(
            wealth=wealth, pref_type=pref_type, consumption=spec((n_consumption,), P()),
            next_regime_to_V_arr={"working": V}, discount_factor=spec((), P()),
            interest_rate=spec((), P()), risk_aversion=spec((n_pref_types,), P()),
            period=spec((), P(), jnp.int32), age=spec((), P()),
        )

    core = jax.jit(max_Q_over_a)
    V_shape = (n_pref_types, n_wealth)
    on_wealth = kernel_arguments(spec(V_shape, P(None, "d")), spec((n_wealth,), P("d")),
                                 spec((n_pref_types,), P(), jnp.int32))
    on_pref_type = kernel_arguments(spec(V_shape, P("d", None)), spec((n_wealth,), P()),
                                    spec((n_pref_types,), P("d"), jnp.int32))
    return {"V_on_wealth": core.lower(**on_wealth), "V_on_pref_type": core.lower(**on_pref_type)}


if __name__ == "__main__":
    for name, lowered in shard_lint_targets().items():
        print(name, lowered.compile().memory_analysis())
