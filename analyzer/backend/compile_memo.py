"""The compile memo: what the tool reads from one XLA compile (the compiled HLO text, memory_analysis()'s
figures, XLA's dumped buffer-assignment and live-range reports, the compiled shardings, cost_analysis(), the
partitioner's warnings: ``jax_adapter.program_record``), kept in the analysis cache's folder under a key made of
exactly what the compile depends on (``compile_parts``): the program's text with its source locations, the compile
options, the devices and the target, the compilers, XLA's environment and the tool's source. No report setting
is in it: a lint run again with another threshold, budget, ignore list or rule option (a miss of the analysis
cache, whose key holds them all) compiles nothing; suggest's versions and check's candidates whose text lint
compiled before are read back too. Used wherever the analysis cache is (``--cache-dir``; ``--no-cache``
turns both off), by every compile whose executable is read, never run; ``rewrite``, which runs its
executables, compiles them (``runs``).

JAX's persistent compilation cache cannot stand in for it (adapter/devices.py): a hit there writes no dumps,
lists another stack-frame table on a CPU, and is never read back for a compile-only target.

With ``JAX_SHARD_LINT_COMPILE_LOG`` set to a file, one JSON line per compile or memo read is appended to it (the
test running it, from pytest's PYTEST_CURRENT_TEST; the key; hit, miss or off; the seconds; where the compile is a
fix check's, its stage of the fix-check pipeline and its candidate, as ``described`` names them), to find the
compiles a run repeats and what each one is for; a fix candidate measured on a program the same checks compiled
before is a line too ("same", no key), and so is each fix-check stage when it ends ("stage": its wall seconds and
the CPU seconds of the whole process while it ran, every thread's, XLA's compiling threads included).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from ..adapter import jax_adapter
from ..cache.analysis_cache import AnalysisCache
from ..cache.cache_key import cache_key, file_digest, text_digest
from ..context.config import Settings
from . import cached_analysis

COMPILE_LOG_ENV = "JAX_SHARD_LINT_COMPILE_LOG"
# The memo's folder inside the analysis cache's, and how many compiles it keeps (least recently used go first):
# an entry holds XLA's texts, up to a few MB for a real model's step.
MEMO_FOLDER = "compiles"
MEMO_ENTRIES = 2048


class CompileRecord(BaseModel):
    """One compile's result as ``jax_adapter.program_record`` writes it."""
    program: dict[str, Any]


_open: dict[str, AnalysisCache] = {}


def compile_memo(settings: Settings) -> AnalysisCache | None:
    """The run's compile memo (one per folder and process), or None where the analysis cache is off."""
    if not settings.cache_dir:
        return None
    folder = os.path.join(os.path.abspath(settings.cache_dir), MEMO_FOLDER)
    if folder not in _open:
        _open[folder] = AnalysisCache(folder, max_entries=MEMO_ENTRIES)
    return _open[folder]


@functools.lru_cache(maxsize=16)
def _program_digest(text: str) -> str:
    """The program XLA compiles, its source locations included, the tool's own frames and its callers' made
    alike (cached_analysis.without_tool_frames: the analysis cache's key reads it the same way)."""
    return text_digest(cached_analysis.without_tool_frames(text))


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
                   "config": target.config_digest if target is not None else file_digest(settings.target_config)},
        # Read through cached_analysis, so that the analysis cache's key and this one change together.
        "tool": {"source": cached_analysis.tool_source_digest()},
        "compilers": jax_adapter.compiler_versions(),
        "environment": cached_analysis.compiler_environment(settings.platform),
    }


# What the compiles started in this context are for ("stage": the fix-check stage, "candidate": its label), for
# the compile log only: nothing read from a compile depends on it.
_purpose: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("compile_purpose", default=())


@contextlib.contextmanager
def described(**purpose: str) -> Iterator[None]:
    """Compiles logged inside it (on this thread) name ``purpose`` beside their key, added to the one around it."""
    token = _purpose.set(tuple({**dict(_purpose.get()), **purpose}.items()))
    try:
        yield
    finally:
        _purpose.reset(token)


def current_purpose() -> dict[str, str]:
    """What compiles started here now are for (``described``), to hand to a thread that compiles for it."""
    return dict(_purpose.get())


def log_reuse() -> None:
    """Logs a fix candidate measured on a program compiled before in the same checks (side_by_side.once,
    same_program): no compile, memo "same"."""
    _log(lambda: {"entry": "candidate"}, 0.0, "same")


def process_cpu_seconds() -> float:
    """The CPU seconds this process has used so far, all its threads (XLA compiles in threads of its own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def stage_logged(stage: str) -> Iterator[None]:
    """Inside it, compiles are logged as ``stage``'s (``described``); when it ends, one line says the stage's wall
    seconds and the process's CPU seconds over them (memo "stage"): what each fix-check stage costs, its compiles,
    its solves and our passes on its candidates together."""
    start, cpu = time.perf_counter(), process_cpu_seconds()
    with described(stage=stage):
        try:
            yield
        finally:
            _log(lambda: {"entry": "stage"}, time.perf_counter() - start, "stage",
                 cpu=round(process_cpu_seconds() - cpu, 3))


def _log(parts: Callable[[], dict[str, Any]], seconds: float, memo: str, **extra: Any) -> None:
    path = os.environ.get(COMPILE_LOG_ENV)
    if not path:
        return
    described = parts()
    keyed = memo not in ("same", "stage")
    line = json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
                       "entry": described["entry"], "key": cache_key(described)[:16] if keyed else None,
                       "memo": memo, "seconds": round(seconds, 3), **extra, "pid": os.getpid(),
                       **dict(_purpose.get())}) + "\n"
    # One write of a short line to a file opened for appending: workers writing side by side do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _through_memo(compile_: Callable[[], jax_adapter.CompiledProgram], parts: Callable[[], dict[str, Any]],
                  settings: Settings, runs: bool) -> jax_adapter.CompiledProgram:
    """``compile_()``'s result, read from the memo when an entry has the same key (without the executable);
    compiled when the caller ``runs`` the executable or the analysis cache is off."""
    memo = None if runs else compile_memo(settings)
    start = time.perf_counter()
    parts = functools.cache(parts)  # the key once, for the memo and the log
    if memo is None:
        program = compile_()
        _log(parts, time.perf_counter() - start, "off")
        return program
    key = cache_key(parts())
    hit = memo.get(key, CompileRecord)
    if hit is None:
        with memo.computing(key):  # another process compiling the same program is waited for, then read
            hit = memo.written_meanwhile(key, CompileRecord)
            if hit is None:  # compiled here: the report reads the compile itself, as without the memo
                program = compile_()
                memo.put(key, CompileRecord(program=jax_adapter.program_record(program)), parts())
                _log(parts, time.perf_counter() - start, "miss")
                return program
    _log(parts, time.perf_counter() - start, "hit")
    return jax_adapter.program_from_record(hit.program)


def compile_lowered(lowered: Any, settings: Settings, with_reports: bool = True,
                    optimize_machine_code: bool = True, text: str | None = None) -> jax_adapter.CompiledProgram:
    """``jax_adapter.compile_lowered`` of a program whose executable is read, never run, through the memo.
    ``text``: its ``stablehlo_text``, where the caller printed it already."""
    options = {"with_reports": with_reports, "optimize_machine_code": optimize_machine_code}

    def parts() -> dict[str, Any]:
        return compile_parts("lowered", text if text is not None else jax_adapter.stablehlo_text(lowered), options,
                             jax_adapter.device_assignment(lowered), settings, jax_adapter.lowered_identity(lowered))

    return _through_memo(lambda: jax_adapter.compile_lowered(lowered, with_reports=with_reports,
                                                             optimize_machine_code=optimize_machine_code),
                         parts, settings, runs=False)


def compile_stablehlo_text(text: str, num_partitions: int, mesh_axes: tuple[tuple[str, int], ...], settings: Settings,
                           device_ids: tuple[int, ...] | None = None, with_reports: bool = True,
                           devices: list | None = None, optimize_machine_code: bool = True, runs: bool = False
                           ) -> jax_adapter.CompiledProgram:
    """``jax_adapter.compile_stablehlo_text`` through the memo; compiled where the caller ``runs`` the
    executable."""
    options = {"num_partitions": num_partitions, "mesh_axes": [list(a) for a in mesh_axes],
               "device_ids": None if device_ids is None else list(device_ids), "with_reports": with_reports,
               "optimize_machine_code": optimize_machine_code}

    def parts() -> dict[str, Any]:
        pool = list(devices) if devices is not None else jax_adapter.cpu_devices()
        return compile_parts("stablehlo", text, options, pool[:num_partitions], settings)

    return _through_memo(lambda: jax_adapter.compile_stablehlo_text(
        text, num_partitions, mesh_axes, device_ids, with_reports=with_reports, devices=devices,
        optimize_machine_code=optimize_machine_code), parts, settings, runs)
