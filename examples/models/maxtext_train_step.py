"""MaxText's own train step, lowered through its own train_compile functions: the thin wrapper a MaxText
user writes to lint their step with every command (lint, fit, sweep, suggest, propagate) on any platform.

Needs MaxText (Python >= 3.12): ``pip install "jax-shard-lint[maxtext]"`` in an environment of its own
(MaxText pins a transformers release that the [test] extra's Flax GPT-2 cannot use).

    jax-shard-lint lint examples/models/maxtext_train_step.py --platform tpu-v5e --devices 8
    jax-shard-lint lint examples/models/maxtext_train_step.py --devices 8 --set layers=4

The parameters are MaxText config keys under short names, a small llama-style model by default; any other
key goes through ``overrides`` (``--set 'overrides=attention=dot_product'``). The step is exactly what
``python -m maxtext.trainers.pre_train.train_compile`` compiles, on the mesh the tool gives: the config,
the shaped state and batch, the shardings and donation all come from MaxText's functions.
"""

import os

import jax
from jax.sharding import AxisType, Mesh


def config_argv(*, layers=2, emb=256, heads=4, head_dim=64, mlp=1024, vocab=1024, seq=256, batch_per_device=1,
                overrides=""):
    """MaxText's config keys for the model, as train_compile takes them after its base.yml."""
    keys = [f"base_num_decoder_layers={layers}", f"base_emb_dim={emb}", f"base_num_query_heads={heads}",
            f"base_num_kv_heads={heads}", f"head_dim={head_dim}", f"base_mlp_dim={mlp}", f"vocab_size={vocab}",
            f"max_target_length={seq}", f"per_device_batch_size={batch_per_device}"]
    return keys + [kv for kv in overrides.split(",") if kv]


def base_config() -> str:
    import maxtext

    return os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")


def shard_lint_targets(mesh_devices=None, **params):
    from flax.core.spmd import logical_axis_rules as axis_rules
    from maxtext.common.common_types import ShardMode
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train, train_compile
    from maxtext.utils import maxtext_utils, sharding

    jax.config.update("jax_default_prng_impl", "unsafe_rbg")  # as train_compile.main does: its keys' shape
    devices = list(mesh_devices) if mesh_devices is not None else jax.devices()
    # The chip MaxText's "autoselected" attention is chosen for (the Pallas splash kernel on TPU); only lowering
    # here, so no jax.distributed.
    hardware = {"tpu": "tpu", "gpu": "gpu"}.get(devices[0].platform, "cpu")
    config = pyconfig.initialize([None, base_config(), *config_argv(**params), f"hardware={hardware}",
                                  "skip_jax_distributed_system=true"])
    # train_compile.get_topology_mesh, over the devices the tool compiles for instead of a topology it names.
    jax.config.update("jax_remove_size_one_mesh_axis_from_type", config.remove_size_one_mesh_axis_from_type)
    mesh_axis_type = AxisType.Explicit if config.shard_mode == ShardMode.EXPLICIT else AxisType.Auto
    mesh = Mesh(maxtext_utils.create_device_mesh(config, devices), config.mesh_axes,
                axis_types=(mesh_axis_type,) * len(config.mesh_axes))

    shaped_args, shaped_kwargs, state_shardings, _, model = train_compile.get_shaped_inputs(mesh, config)
    params_shardings, state_shardings = sharding.maybe_update_params_sharding_with_opt(config, state_shardings)
    input_state_shardings = sharding.build_zero1_input_state_mesh_shardings(config, state_shardings, params_shardings)
    data_sharding = sharding.get_input_data_sharding(config, mesh)
    step, in_shardings, out_shardings, static_argnums, donate_argnums = (
        maxtext_utils.get_functional_train_with_signature(
            train.train_step, data_sharding, input_state_shardings, model, config, params_shardings))
    # train_compile.jit_and_compile up to its lower(): the compile is the tool's.
    with jax.set_mesh(mesh), axis_rules(config.logical_axis_rules):
        jitted = jax.jit(step, in_shardings=in_shardings, out_shardings=out_shardings,
                         static_argnums=static_argnums, donate_argnums=donate_argnums)
        return {"train_step": jitted.lower(*shaped_args, **shaped_kwargs)}
