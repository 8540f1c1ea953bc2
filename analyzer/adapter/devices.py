"""The devices JAX compiles for: the platform and virtual CPU devices chosen before its
backends start, compile-only GPU and TPU targets, the devices present.

Private piece used: whether backends are initialised (``jax._src.xla_bridge.backends_are_initialized``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from .native_stderr import quiet_native_stderr

with quiet_native_stderr():
    import jax


def backends_initialized() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """JAX logs a CUDA plugin that fails to load with its traceback (through Python's
    logging, which the native guard does not hold back): the caller says it in a line."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def configure_devices(platform: str, num_cpu_devices: int) -> None:
    """Select the platform and the number of virtual CPU devices before JAX
    initialises its backends. Raises RuntimeError when that is too late."""
    # JAX's persistent compilation cache stays off (the analysis cache keeps reports instead): a hit writes
    # no XLA dump (compile_lowered reads its reports from one); on a CPU a hit's as_text() lists a compacted
    # stack-frame table (other stack_frame_ids than a fresh compile's, measured on jax 0.10.2 and 0.12); and
    # a compile-only TPU or GPU target's entry is written but never read back ("PjRtCompiler must be
    # constructed with a Client to call DeserializeLoadedExecutable", both releases).
    jax.config.update("jax_enable_compilation_cache", False)
    if backends_initialized():
        if platform == "cpu" and len(jax.devices("cpu")) != num_cpu_devices:
            raise RuntimeError(
                f"JAX is already initialised with {len(jax.devices('cpu'))} CPU devices; "
                f"{num_cpu_devices} were asked for"
            )
        return
    if platform == "cpu":
        # --devices is authoritative: a device count in XLA_FLAGS would fight it.
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = " ".join(
            f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count")
        )
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", num_cpu_devices)
    elif platform == "gpu":
        jax.config.update("jax_platforms", "cuda")
    else:  # a deviceless GPU target: compiles need the CUDA plugin, executions the CPU
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", num_cpu_devices)
    with quiet_native_stderr(), _quiet_logger("jax._src.xla_bridge"):
        try:
            jax.devices()
        except (RuntimeError, AssertionError):  # jax 0.10 asserts when the CUDA plugin fails to load
            if platform == "gpu":
                # No CUDA backend: fall back to the CPU so that JAX stays usable and the
                # caller can say there is no GPU (an uninitialised backend only asserts).
                jax.config.update("jax_platforms", "cpu")
            # Otherwise reported where the devices are needed.


def gpu_target_devices(spec_text: str, num_devices: int, hosts: int = 1) -> list:
    """Compile-only devices of a GPU target described by a GpuTargetConfigProto
    text, over ``hosts`` hosts (devices carry their process_index).
    Raises ImportError without the CUDA PJRT plugin."""
    from jax.experimental import topologies

    try:
        import jax_plugins.xla_cuda12  # noqa: F401
    except ImportError as e:
        raise ImportError("the CUDA PJRT plugin (jax-cuda12-plugin) is not installed") from e
    with quiet_native_stderr():
        topology = topologies.get_topology_desc(
            "", platform="cuda", topology=f"1x{hosts}x{num_devices // hosts}", target_config=spec_text,
        )
    return list(topology.devices)


def tpu_target_devices(topology_name: str, accelerator_type: str) -> list:
    """Compile-only devices of a TPU topology (``v5e:2x4``) through libtpu.
    Raises ImportError without libtpu.

    libtpu reads what pod it runs in from the environment and prints warnings
    when that is unset; on a machine without TPUs there is no pod, so a
    single-host value is given (only where the user has not set one)."""
    import importlib.util

    from jax.experimental import topologies

    if importlib.util.find_spec("libtpu") is None:
        raise ImportError("libtpu is not installed")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", accelerator_type)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    with quiet_native_stderr():
        topology = topologies.get_topology_desc(topology_name=topology_name, platform="tpu")
    # libtpu lists each TensorCore of a v4 chip; JAX runs v4 (and v5p) as megacore,
    # one device per chip, and builds meshes only over those.
    return [d for d in topology.devices if getattr(d, "core_on_chip", 0) == 0]


def gpu_devices() -> list:
    """The GPUs JAX sees; empty when there are none or no CUDA backend is installed."""
    try:
        return [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        return []


def device_kind_summary() -> str:
    devices = jax.devices()
    kinds = sorted({d.device_kind for d in devices})
    return f"{len(devices)} x {', '.join(kinds)}"


def device_identity(devices: list) -> list[list[Any]]:
    """Each device as plain JSON (id, platform, kind, host), for the analysis cache's key."""
    return [[int(d.id), str(d.platform), str(getattr(d, "device_kind", "")), int(getattr(d, "process_index", 0))]
            for d in devices]


def cpu_devices() -> list:
    return list(jax.devices())
