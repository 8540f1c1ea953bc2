"""The front end of every command: the run's target resolved once, when the command starts (in the supervised
child: JAX's devices can be configured once per process, and check, gate, propagate, rewrite and sweep learn
their device count or platform from their own input). ``resolve_run_target`` is the one function that
resolves it; the settings it returns carry the frozen target (platforms/resolved_target.py) that everything
below takes as a parameter, and nothing below resolves it again (tests/test_architecture_target.py checks that
nothing else calls the resolvers)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ..adapter import jax_adapter
from ..cache.cache_key import file_digest
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..platforms import devices as run_devices
from ..platforms.gpu_targets import target_devices
from ..platforms.resolved_target import ResolvedTarget, program_target, resolve_spec, with_devices
from ..platforms.tpu_targets import tpu_devices

# What the tool compiles for: devices it selects (every command but run), none (a library caller's own
# lowered programs, analyzer/testing.py), or the programs a script compiled itself (run).
Selection = Literal["select", "none", "program"]

# The target this process made its devices for: a command that another one runs (the lints of a sweep in
# this process, snapshot's lint, gate's check) is handed settings that hold it, and takes them as they are.
_made_here: ResolvedTarget | None = None


def resolve_run_target(settings: Settings, needed_devices: int = 0,
                       selection: Selection = "select") -> tuple[Settings, list]:
    """The settings with the run's target, and the devices the run compiles for. ``needed_devices``: what
    the command's input needs (a checked-in module's partitions), over the settings' count. A target the
    asking process resolved (an executor's child is given it, serialized: platforms/target_wire.py) is taken
    as it is, its devices made here; a target already made in this process is returned as it is."""
    global _made_here
    if needed_devices > settings.devices:
        settings = replace(settings, devices=needed_devices)
    if selection == "program":
        return _as_run(settings), []
    if selection == "none":
        # A library caller's programs, lowered as they are: the target resolved as _select_run_devices
        # resolves it (a TPU slice from the settings' count), with no devices configured.
        kind = jax_adapter.device_kind_summary() if settings.platform == "gpu" else None
        spec = resolve_spec(settings.platform, settings.devices, settings.topology, settings.hosts,
                            settings.target_config)
        target = replace(with_devices(spec, settings.devices, settings.topology, kind, None),
                         config_digest=file_digest(settings.target_config))
        return replace(settings, target=target), []
    if settings.target is not None and settings.target is _made_here:
        return settings, run_devices.selected()
    settings = _select_run_devices(settings)
    _made_here = settings.target
    return settings, run_devices.selected()


def _as_run(settings: Settings) -> Settings:
    """The settings with the target of programs the script compiled (resolved_target.program_target: run
    selects no devices): the step time's device model, and without --budget or --device, the memory of one
    device of the platform as the budget."""
    kind = jax_adapter.device_kind_summary() if settings.platform == "gpu" else None
    target = program_target(settings.platform, settings.devices, settings.topology, settings.hosts,
                            settings.target_config, kind)
    settings = replace(settings, target=target)
    if settings.budget_bytes is not None:
        return settings
    return replace(settings, budget_bytes=target.memory_bytes,
                   budget_source=settings.platform if target.memory_bytes is not None else None)


def _select_run_devices(settings: Settings) -> Settings:
    """Configure JAX and choose the devices this run compiles for; the settings come back
    resolved: their ``target`` (the GPU spec, the TPU slice with its device count and topology, the
    label, a device's memory, the digest of a target config file) made here once (or the asking
    process's, taken as it is), and an accelerator's own budget where none was given."""
    try:
        jax_adapter.configure_devices(settings.platform, settings.devices)
    except RuntimeError as e:
        raise ShardLintInputError("--devices", str(e)) from None
    given = settings.target
    spec = given if given is not None else resolve_spec(settings.platform, settings.devices, settings.topology,
                                                        settings.hosts, settings.target_config)
    if spec.gpu is not None:
        chosen = target_devices(spec.gpu, settings.devices, settings.hosts)
    elif spec.tpu is not None:
        chosen = tpu_devices(spec.tpu)
        if given is None:
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
    if given is not None or (settings.platform == "gpu" and not chosen):
        # Given: resolved by the asking process. No GPU: said by check_gpu_platform, nothing to resolve.
        return settings
    device_kind = jax_adapter.device_kind_summary() if settings.platform == "gpu" else None
    target = replace(with_devices(spec, settings.devices, settings.topology, device_kind, chosen),
                     config_digest=file_digest(settings.target_config))
    return replace(settings, target=target)
