"""A target's analysis through the analysis cache (analyzer/cache): the key's parts
gathered from the settings, the devices and the compilers; a hit returns the stored
report without compiling, a miss analyses and stores.

Only finished reports are stored, the compiler's out-of-memory refusal included (a
measurement); a program XLA rejects is an error every time, never an entry.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ...passes.models.report import TargetReport
from .. import __version__
from ..adapter import jax_adapter
from ..cache.analysis_cache import AnalysisCache, Stored
from ..cache.cache_key import cache_key, text_digest, tool_source_digest
from ..context.config import Settings, library_folders
from ..inputs.files import tool_folders
from ..platforms.tpu_targets import TPU_TARGETS

# Environment variables that change what XLA compiles.
_COMPILER_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_ACCELERATOR_TYPE", "NVIDIA_TF32_OVERRIDE")
# XLA flags that change no figure a report reads, left out of the key: LLVM's optimisation level of the machine
# code (the collectives and the memory figures are XLA's before LLVM runs, and the tool compiles CPU programs at
# -O0 itself: adapter/compiling.py, tests/analyzer/adapter/test_read_only_compile.py) and the number of virtual
# CPU devices (the devices are in the key; a CPU run drops the flag: adapter/devices.py). A console script run
# without the flags (a user's shell, a test's child) and one with them (the suite's process) share entries.
_FLAGS_WITHOUT_FIGURES = ("--xla_backend_optimization_level", "--xla_force_host_platform_device_count")


# Read by libtpu alone: no figure of a CPU or GPU compile depends on them, so only a TPU compile's key holds them.
# The tool sets TPU_ACCELERATOR_TYPE itself when it first compiles for a TPU target (adapter/devices.py), and it
# stays set for the rest of the process: in every key, a CPU program linted after a TPU one in the same process
# (the README's commands, a test worker) missed the entry it had written before and was compiled again.
_LIBTPU_ENV = ("LIBTPU_INIT_ARGS", "TPU_ACCELERATOR_TYPE")


def compiler_environment(platform: str) -> dict[str, str | None]:
    environment = {k: os.environ.get(k) for k in _COMPILER_ENV if platform in TPU_TARGETS or k not in _LIBTPU_ENV}
    flags = [f for f in (environment["XLA_FLAGS"] or "").split() if f.split("=")[0] not in _FLAGS_WITHOUT_FIGURES]
    environment["XLA_FLAGS"] = " ".join(flags) or None
    return environment

_open: dict[str, AnalysisCache] = {}


def analysis_cache(settings: Settings) -> AnalysisCache | None:
    """The run's cache (one per folder and process, so its counts add up), or None."""
    if not settings.cache_dir:
        return None
    folder = os.path.abspath(settings.cache_dir)
    if folder not in _open:
        _open[folder] = AnalysisCache(folder)
    return _open[folder]


def settings_parts(settings: Settings) -> dict[str, Any]:
    """Every setting a report depends on: what it compiles for (the target resolved with the devices, and
    the contents of its config file, read when it was resolved; settings without one, a library caller's,
    are told apart by the fields it is resolved from: every command resolves it before it analyses), what
    the rules are told, and whose code a frame is."""
    target = settings.target
    return {
        "platform": settings.platform, "platform_label": target.label if target is not None else None,
        "devices": settings.devices, "topology": settings.topology, "hosts": settings.hosts,
        "target_config": target.config_digest if target is not None else None,
        "budget_bytes": settings.budget_bytes, "ignore": sorted(settings.ignore), "loop_trips": settings.loop_trips,
        "options": {k: repr(v) for k, v in sorted(settings.options.items())},
        "severities": {k: str(v.value) for k, v in sorted(settings.severities.items())},
        "first_party": list(settings.first_party), "third_party": list(settings.third_party),
        "user_roots": list(settings.user_roots), "library_folders": list(library_folders(settings)),
        "ownership_root": os.path.dirname(settings.config_file) if settings.config_file else os.getcwd(),
    }


def without_tool_frames(text: str) -> str:
    """The program's text with the tool's own frames in its source locations made alike, and the
    frames that called the tool.

    A location carries the whole Python stack of the op, down through the command that
    called the script (lint, gate, sweep, fit each reach it by their own lines) and whatever
    called the tool (a console script, or a test of the user's through the pytest plugin:
    each test is a line of its own). Those frames are the tool's or its caller's, never
    the user's or a library's a finding names (a finding's source is the innermost user
    frame, inside the tool's call of the script), so they do not change the report; made
    alike, every command and every caller reuses the others' entries."""
    folders = tuple(os.path.join(f, "") for f in tool_folders())
    alike = _FILE_LINE_COLUMN.sub(
        lambda m: f'"{_TOOL_FILE}":0:0' if m.group(1).startswith(folders) else m.group(0), text)
    return _without_tool_chain(_without_callers(alike))


_TOOL_FILE = "<jax-shard-lint>"
# "/path/file.py":342:15, and its range: " to :43" or " to 343:12".
_FILE_LINE_COLUMN = re.compile(r'"(/[^"\n]*\.py)":\d+:\d+(?: to \d*:\d+)?')
# MLIR prints every location of a module with debug info as an alias at its end: a frame is a named
# location of a file location ("fn"(#loc7)), a stack a chain of call sites (callsite(#loc81 at #loc90)).
_LOCATION_ALIAS = re.compile(r"^(#loc\d*) = loc\((.*)\)$", re.M)
_FRAME = re.compile(r'^"(?:[^"\\]|\\.)*"\((#loc\d*)\)$')
_CALL_SITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")


def _location_stacks(text: str) -> tuple[dict[str, str], dict[str, str], Callable[[str], list[str]]]:
    """The text's location aliases (alias -> its body), each frame alias's file alias, and the stack of frame
    aliases a location stands for, innermost first (a call site's callee's, then its caller's; memoized)."""
    aliases = {m.group(1): m.group(2) for m in _LOCATION_ALIAS.finditer(text)}
    file_of = {alias: m.group(1) for alias, body in aliases.items() if (m := _FRAME.match(body))}
    stacks: dict[str, list[str]] = {}

    def frames(alias: str) -> list[str]:  # innermost first
        if alias not in stacks:
            site = _CALL_SITE.match(aliases.get(alias, ""))
            stacks[alias] = frames(site.group(1)) + frames(site.group(2)) if site else (
                [alias] if alias in file_of else [])
        return stacks[alias]

    return aliases, file_of, frames


def _without_callers(text: str) -> str:
    """``text`` with every frame outside the tool's own outermost frame of a stack (the callers of
    the tool) made alike: its function name and its file location."""
    aliases, file_of, frames = _location_stacks(text)
    tool_location = f'"{_TOOL_FILE}":0:0'

    callers: set[str] = set()
    for alias, body in aliases.items():
        if body.startswith("callsite("):
            stack = frames(alias)
            tool = [i for i, frame in enumerate(stack) if aliases.get(file_of[frame]) == tool_location]
            if tool:
                callers.update(stack[tool[-1] + 1:])
    if not callers:
        return text
    caller_files = {file_of[f] for f in callers} - {file_of[f] for f in file_of if f not in callers}

    def alike(m: re.Match[str]) -> str:
        if m.group(1) in callers:
            return f'{m.group(1)} = loc("<caller>"({file_of[m.group(1)]}))'
        if m.group(1) in caller_files:
            return f'{m.group(1)} = loc("<caller>":0:0)'
        return m.group(0)

    return _LOCATION_ALIAS.sub(alike, text)


_ALIAS_REFERENCE = re.compile(r"#loc\d*(?!\w)")
_OUTSIDE = "#<tool>"


def _without_tool_chain(text: str) -> str:
    """``text`` (its tool and caller frames made alike) with each stack's part from the tool's innermost frame
    outward as one token, and the location aliases numbered anew in the order they are first named.

    Commands reach the script by call chains of their own lengths (snapshot calls it through lint's
    function, one frame more; gate and sweep through theirs): frames made alike one by one still left the
    chains, and so the aliases' numbers, apart, and snapshot compiled again what lint had just compiled."""
    aliases, file_of, frames = _location_stacks(text)
    outer_files = {alias for alias, body in aliases.items()
                   if body in (f'"{_TOOL_FILE}":0:0', '"<caller>":0:0')}

    outside = {alias for alias in aliases if (stack := frames(alias)) and file_of[stack[0]] in outer_files}
    outside |= outer_files
    if not outside:
        return text
    bodies = {alias: body for alias, body in aliases.items() if alias not in outside}
    renamed: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        if m.group(0) in outside:
            return _OUTSIDE
        return renamed.setdefault(m.group(0), f"#loc{len(renamed)}")

    program = _ALIAS_REFERENCE.sub(rename, _LOCATION_ALIAS.sub("", text)).rstrip("\n")
    defined: dict[str, str] = {}
    while pending := [alias for alias in renamed if alias in bodies and renamed[alias] not in defined]:
        for alias in pending:  # a definition names aliases of its own: they are numbered as it is written
            defined[renamed[alias]] = _ALIAS_REFERENCE.sub(rename, bodies[alias])
    ordered = sorted(defined.items(), key=lambda item: int(item[0][len("#loc"):]))
    return "\n".join([program, *(f"{alias} = loc({body})" for alias, body in ordered)]) + "\n"


def key_parts(kind: str, name: str, program_text: str, settings: Settings, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": kind, "target": name, "program": text_digest(without_tool_frames(program_text)), "devices": devices,
        "settings": settings_parts(settings),
        # Paths in a report's explanations are shown relative to the working directory.
        "cwd": os.getcwd(),
        "tool": {"version": __version__, "source": tool_source_digest()},
        "compilers": jax_adapter.compiler_versions(),
        "environment": compiler_environment(settings.platform),
    }


def figures_key_parts(kind: str, name: str, program_text: str, settings: Settings,
                      devices: dict[str, Any]) -> dict[str, Any]:
    """The key of a report read for its figures only (a fix candidate's peak and traffic: no rule runs on it,
    no source is shown): the program without its source locations, and none of the settings that say whose
    code a frame is or where paths are shown from. lint's candidates, compiled from the script's lowered text,
    and check's or gate's of its snapshot (the same program read from a file: its locations numbered apart,
    its user roots unknown) are one entry; so are a command run from another folder's (the README's)."""
    parts = key_parts(kind, name, jax_adapter.text_without_locations(program_text), settings, devices)
    for whose in ("first_party", "third_party", "user_roots", "library_folders", "ownership_root"):
        parts["settings"].pop(whose)
    parts.pop("cwd")
    return parts


def placed(devices: list, count: int) -> dict[str, Any]:
    """The devices checked-in StableHLO compiles on (the first ``count`` of the run's), for the key."""
    return {"devices": jax_adapter.device_identity(devices[:count])}


def cached_text_report(name: str, text: str, num_partitions: int, settings: Settings, devices: list,
                       analyze: Callable[[], TargetReport], conflict_checked: bool = False) -> TargetReport:
    """A StableHLO text's report (a checked-in program, one of suggest's versions) through the cache.
    ``conflict_checked``: its other-side why chains were checked by compiling (check with its fix checks, as
    lint's are), which prints chains a report without them does not."""
    return cached_report(analysis_cache(settings),
                         lambda: {**key_parts("stablehlo", name, text, settings, placed(devices, num_partitions)),
                                  "conflict_checked": conflict_checked}, analyze)


def cached(cache: AnalysisCache | None, parts: Callable[[], dict[str, Any]], compute: Callable[[], Stored],
           model: type[Stored]) -> Stored:
    """``compute()``'s result, from the cache when an entry has the same key."""
    if cache is None:
        return compute()
    described = parts()
    key = cache_key(described)
    hit = cache.get(key, model)
    if hit is not None:
        return hit
    with cache.computing(key):  # another run computing this entry is waited for, then read
        hit = cache.written_meanwhile(key, model)
        if hit is not None:
            return hit
        value = compute()
        cache.put(key, value, described)
    return value


def cached_report(cache: AnalysisCache | None, parts: Callable[[], dict[str, Any]],
                  analyze: Callable[[], TargetReport]) -> TargetReport:
    return cached(cache, parts, analyze, TargetReport)
