"""Every XLA compile whose executable is read, never run (a target's, a checked-in program's, a fix candidate's,
one of suggest's versions), through one place, timed; with ``JAX_SHARD_LINT_COMPILE_LOG`` set to a file, one
JSON line per compile is appended to it (the test running it, from pytest's PYTEST_CURRENT_TEST; the key; the
seconds), to find the compiles a run repeats.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

from ..adapter import jax_adapter
from ..cache.cache_key import cache_key, text_digest, tool_source_digest
from ..context.config import Settings
from .cached_analysis import _compiler_environment, _without_tool_frames

COMPILE_LOG_ENV = "JAX_SHARD_LINT_COMPILE_LOG"


@functools.lru_cache(maxsize=16)
def _program_digest(text: str) -> str:
    """The program XLA compiles, its source locations included, the tool's own frames and its callers' made
    alike (cached_analysis._without_tool_frames: the analysis cache's key reads it the same way)."""
    return text_digest(_without_tool_frames(text))


def compile_parts(entry: str, text: str, options: dict[str, Any], devices: list, settings: Settings,
                  identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything one compile's result depends on: the program's text with its locations, the compile
    options, the devices it is placed on (ids, platform, kind, host) and the target they are made from
    (platform, topology, a GPU target's config file), the releases that compile it, the environment
    variables XLA reads, and the tool's own source (which reads the result). No report setting."""
    target = settings.target
    return {
        "kind": "xla-compile", "entry": entry, "program": _program_digest(text), "options": options,
        "devices": jax_adapter.device_identity(devices), "lowered": identity,
        "target": {"platform": settings.platform, "label": target.label if target is not None else None,
                   "topology": settings.topology, "hosts": settings.hosts,
                   "config": target.config_digest if target is not None else None},
        "tool": {"source": tool_source_digest()},
        "compilers": jax_adapter.compiler_versions(),
        "environment": _compiler_environment(settings.platform),
    }


def _log(parts: Callable[[], dict[str, Any]], seconds: float, memo: str) -> None:
    path = os.environ.get(COMPILE_LOG_ENV)
    if not path:
        return
    described = parts()
    line = json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
                       "entry": described["entry"], "key": cache_key(described)[:16], "memo": memo,
                       "seconds": round(seconds, 3), "pid": os.getpid()}) + "\n"
    # One write of a short line to a file opened for appending: workers writing side by side do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _timed(compile_: Callable[[], jax_adapter.CompiledProgram],
           parts: Callable[[], dict[str, Any]]) -> jax_adapter.CompiledProgram:
    start = time.perf_counter()
    program = compile_()
    _log(parts, time.perf_counter() - start, "miss")
    return program


def compile_lowered(lowered: Any, settings: Settings, with_reports: bool = True,
                    optimize_machine_code: bool = True) -> jax_adapter.CompiledProgram:
    """``jax_adapter.compile_lowered`` of a program whose executable is read, never run."""
    options = {"with_reports": with_reports, "optimize_machine_code": optimize_machine_code}

    def parts() -> dict[str, Any]:
        return compile_parts("lowered", jax_adapter.stablehlo_text(lowered), options,
                             jax_adapter.device_assignment(lowered), settings, jax_adapter.lowered_identity(lowered))

    return _timed(lambda: jax_adapter.compile_lowered(lowered, with_reports=with_reports,
                                                      optimize_machine_code=optimize_machine_code), parts)


def compile_stablehlo_text(text: str, num_partitions: int, mesh_axes: tuple[tuple[str, int], ...], settings: Settings,
                           device_ids: tuple[int, ...] | None = None, with_reports: bool = True,
                           devices: list | None = None, optimize_machine_code: bool = True
                           ) -> jax_adapter.CompiledProgram:
    """``jax_adapter.compile_stablehlo_text`` of a program whose executable is read, never run."""
    options = {"num_partitions": num_partitions, "mesh_axes": [list(a) for a in mesh_axes],
               "device_ids": None if device_ids is None else list(device_ids), "with_reports": with_reports,
               "optimize_machine_code": optimize_machine_code}

    def parts() -> dict[str, Any]:
        pool = list(devices) if devices is not None else jax_adapter.cpu_devices()
        return compile_parts("stablehlo", text, options, pool[:num_partitions], settings)

    return _timed(lambda: jax_adapter.compile_stablehlo_text(
        text, num_partitions, mesh_axes, device_ids, with_reports=with_reports, devices=devices,
        optimize_machine_code=optimize_machine_code), parts)
