"""The run's target, resolved at the command's start: the devices JAX is configured with and the
ones the run compiles for, and the settings with their resolved ``target``."""

from __future__ import annotations

from dataclasses import replace

from ..adapter import jax_adapter
from ..cache.cache_key import file_digest
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..platforms import devices as run_devices
from ..platforms.gpu_targets import target_devices
from ..platforms.resolved_target import ResolvedTarget, resolve_spec, with_devices
from ..platforms.tpu_targets import tpu_devices


def without_device_selection(settings: Settings) -> Settings:
    """The settings with a target resolved for programs whose devices the tool does not select (a library
    caller's, lowered as they are): resolved as select_run_devices resolves it (a TPU slice from the
    settings' count), with no devices configured."""
    kind = jax_adapter.device_kind_summary() if settings.platform == "gpu" else None
    target = replace(with_devices(_spec(settings), settings.devices, settings.topology, kind),
                     config_digest=file_digest(settings.target_config))
    return replace(settings, target=target)


def _spec(settings: Settings) -> ResolvedTarget:
    return resolve_spec(settings.platform, settings.devices, settings.topology, settings.hosts,
                        settings.target_config)


def select_run_devices(settings: Settings) -> tuple[Settings, list]:
    """Configure JAX and choose the devices this run compiles for; the settings come back
    resolved: their ``target`` (the GPU spec, the TPU slice with its device count and topology, the
    label, a device's memory, the digest of a target config file) made here once, and an accelerator's
    own budget where none was given."""
    try:
        jax_adapter.configure_devices(settings.platform, settings.devices)
    except RuntimeError as e:
        raise ShardLintInputError("--devices", str(e)) from None
    spec = _spec(settings)
    if spec.gpu is not None:
        chosen = target_devices(spec.gpu, settings.devices, settings.hosts)
    elif spec.tpu is not None:
        chosen = tpu_devices(spec.tpu)
        settings = replace(settings, devices=len(chosen), topology=spec.tpu.topology)
    elif settings.platform == "gpu":
        chosen = jax_adapter.gpu_devices()
    else:
        chosen = None
    run_devices.select(chosen)
    # The command line's settings have the budget already; a library caller's may not.
    if settings.budget_bytes is None:
        settings = replace(settings, budget_bytes=spec.memory_bytes,
                           budget_source=settings.platform if spec.memory_bytes is not None else None)
    if settings.platform == "gpu" and not chosen:  # no GPU: said by check_gpu_platform, nothing to resolve
        return settings, run_devices.selected()
    device_kind = jax_adapter.device_kind_summary() if settings.platform == "gpu" else None
    target = replace(with_devices(spec, settings.devices, settings.topology, device_kind),
                     config_digest=file_digest(settings.target_config))
    return replace(settings, target=target), run_devices.selected()
