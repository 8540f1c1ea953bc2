"""The target one run compiles for, resolved once: made by the front end when the command starts
(backend/run_target.py) and carried on the run's Settings, so what lies below reads it and never
resolves it again (the GPU spec loaded, the TPU topology chosen, the label, the memory of a device)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...passes.models.device_spec import DeviceSpec
from .gpu_targets import GPU_TARGETS, GpuTarget, load_target
from .performance import spec_for_platform
from .presets import PRESETS
from .tpu_targets import TPU_GENERATIONS, TPU_TARGETS, TpuGeneration, TpuTarget, resolve_target


@dataclass(frozen=True)
class ResolvedTarget:
    platform: str  # the --platform: cpu, gpu, or a GPU or TPU target
    num_devices: int  # the devices compiled for (a TPU slice's own count)
    topology: str | None  # a TPU slice's grid, e.g. 2x4
    hosts: int
    target_config: str | None  # the user's GpuTargetConfigProto file, if any
    gpu: GpuTarget | None = None  # a GPU target's spec
    tpu: TpuTarget | None = None  # a TPU target's generation and topology
    memory_bytes: int | None = None  # one device's memory (None for cpu and gpu): the budget when none is given
    # The bundled spec's memory (a GPU target's, whatever --target-config gives): what a warning about a
    # budget from another device's preset names as the target's own.
    bundled_memory_bytes: int | None = None
    # What reports call it (cpu (virtual devices), tpu-v5e (compiled for 8 x TPU-V5E, topology v5e:2x4, ...)).
    label: str = ""
    # What JAX calls the GPUs at hand (--platform gpu): the step-time model's device.
    device_kind: str | None = None
    # The device model behind the step-time estimate (None for GPUs it does not know).
    device_spec: DeviceSpec | None = None
    # The content digest of the target_config file, read where the target was resolved (the analysis
    # cache's key names it: the same path with other contents compiles for another GPU).
    config_digest: str | None = None
    # The hosts of a TPU slice's devices (libtpu assigns each its host): what the label names.
    slice_hosts: int = 1
    # A TPU target's generation (run's programs have one and no slice: a dump names its own grid).
    tpu_generation: TpuGeneration | None = None

    def describes(self, platform: str, devices: int, topology: str | None, hosts: int,
                  target_config: str | None) -> bool:
        """Whether this target was resolved for these settings (a run that changes them has another)."""
        return (self.platform, self.num_devices, self.topology, self.hosts, self.target_config) == (
            platform, devices, topology, hosts, target_config)


def resolve_spec(platform: str, devices: int, topology: str | None, hosts: int,
                 target_config: str | None) -> ResolvedTarget:
    """The target's spec, before its devices exist: a GPU target's config loaded, a TPU slice's topology
    chosen (and with it the device count), the memory of one device."""
    if platform in GPU_TARGETS:
        gpu = load_target(platform, target_config)
        # The bundled spec's memory is its preset's (presets.py read it from the spec once).
        bundled = PRESETS[platform].memory_bytes if target_config else gpu.memory_bytes
        return ResolvedTarget(platform, devices, topology, hosts, target_config, gpu=gpu,
                              memory_bytes=gpu.memory_bytes, bundled_memory_bytes=bundled)
    if platform in TPU_TARGETS:
        tpu = resolve_target(platform, devices, topology)
        memory = tpu.generation.memory_bytes
        return ResolvedTarget(platform, devices, topology, hosts, target_config, tpu=tpu, memory_bytes=memory,
                              bundled_memory_bytes=memory, tpu_generation=tpu.generation)
    return ResolvedTarget(platform, devices, topology, hosts, target_config)


def program_target(platform: str, devices: int, topology: str | None, hosts: int, target_config: str | None,
                   device_kind: str | None) -> ResolvedTarget:
    """The target of programs a script compiled itself (``run``): no devices are selected and no TPU slice
    is chosen (the program was compiled for the devices the script had), so it is the platform's alone:
    the memory of one device (a GPU target's from its config, a TPU generation's) and the step time's
    device model (for --platform gpu, that of the GPUs JAX sees)."""
    gpu = load_target(platform, target_config) if platform in GPU_TARGETS else None
    generation = TPU_GENERATIONS[platform] if platform in TPU_TARGETS else None
    memory = gpu.memory_bytes if gpu is not None else (generation.memory_bytes if generation is not None else None)
    return ResolvedTarget(platform, devices, topology, hosts, target_config, gpu=gpu, memory_bytes=memory,
                          device_kind=device_kind, device_spec=spec_for_platform(platform, device_kind),
                          tpu_generation=generation)


def with_devices(spec: ResolvedTarget, devices: int, topology: str | None, device_kind: str | None,
                 chosen: list | None) -> ResolvedTarget:
    """The target once its devices are selected (platforms/devices.py): their count, the topology, what
    JAX calls the GPUs at hand, the hosts of a TPU slice's ``chosen`` devices, the label reports give it
    and the device model of its step time."""
    slice_hosts = max(1, len({d.process_index for d in chosen or []})) if spec.tpu is not None else 1
    target = replace(spec, num_devices=devices, topology=topology, device_kind=device_kind, slice_hosts=slice_hosts,
                     device_spec=spec_for_platform(spec.platform, device_kind))
    return replace(target, label=target_label(target))


def target_label(target: ResolvedTarget) -> str:
    """What reports call the platform; a TPU slice's hosts are those of the devices selected."""
    platform, tpu = target.platform, target.tpu
    if platform == "cpu":
        return "cpu (virtual devices)"
    if platform == "gpu":
        return f"gpu ({target.device_kind})"
    if tpu is not None:
        over = f" over {target.slice_hosts} hosts" if target.slice_hosts > 1 else ""
        return (f"{platform} (compiled for {tpu.num_devices} x {platform.upper()}, topology "
                f"{tpu.topology_name}{over}, without one)")
    more = f", {target.hosts} hosts" if target.hosts > 1 else ""
    return f"{platform} (compiled for {target.num_devices} x {platform.upper()} without one{more})"
