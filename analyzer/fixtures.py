"""Programs checked in as files, analysed without running any Python from them:
StableHLO (``.mlir``), ``jax.export`` artifacts, compiled HLO text as XLA dumps
it (``*after_optimizations*.txt``, with the buffer-assignment report beside it
when present), and whole XLA dump directories."""

from __future__ import annotations

import glob
import os
import re

from ..passes.hlo.memory import MemoryStats
from ..passes.models.report import TargetReport
from ..passes.pipeline import CompiledFacts, analyze_target, analyze_hlo_only
from ..passes.stablehlo.module import missing_entry, read_entry_signature
from . import isolation, jax_adapter
from .config import Settings
from .errors import ShardLintInputError, one_line
from .input_limits import check_device_count, check_mlir_text
from .input_files import check_input_file, read_input_bytes, read_input_text

_HLO_SUFFIX = re.compile(r"after_optimizations\.txt$")


def read_mlir(path: str):
    """Parse a StableHLO file; bad input is one line naming the file."""
    text = read_input_text(path)
    if not text.strip():
        raise ShardLintInputError(path, "not a StableHLO module: the file is empty")
    check_mlir_text(path, text)
    isolation.phase(path, "parsing the module")
    try:
        module = jax_adapter.parse_stablehlo(text)
    except Exception as e:
        lines = str(e).strip().splitlines()
        detail = next((ln.strip() for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
        # MLIR names the text it parsed "-": say the line and column of the file instead.
        detail = re.sub(r'^error: "-":(\d+):(\d+): ', r"line \1, column \2: ", detail)
        raise ShardLintInputError(path, f"not a StableHLO module: {detail}") from None
    problem = missing_entry(module)
    if problem:
        raise ShardLintInputError(path, f"not a StableHLO program: {problem}")
    return module, text


def analyze_text(name: str, text: str, settings: Settings, where: str, devices: list | None = None):
    """Compile StableHLO text on the run's devices and run the lint pipeline on it."""
    module = jax_adapter.parse_stablehlo(text)
    sig = read_entry_signature(module)
    from .platform_selection import platform_label

    isolation.phase(where, "compiling the module with XLA")
    try:
        program = jax_adapter.compile_stablehlo_text(
            text, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids, devices=devices)
    except Exception as e:
        raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}") from e
    facts = CompiledFacts(
        hlo_text=program.hlo_text, platform=platform_label(settings),
        memory=MemoryStats(**program.memory) if program.memory else None,
        live_range_text=program.live_range_text, buffer_assignment_text=program.buffer_assignment_text,
        output_shardings=tuple(
            jax_adapter.sharding_axes(s, len(o.shape)) for s, o in zip(program.output_shardings, sig.outputs)
        ) or None,
        xla_cost=program.cost,
    )
    return analyze_target(name, module, facts, settings.pass_config()), program, module


def _read(path: str) -> str:
    return read_input_text(path)


def _beside_path(hlo_path: str, report: str) -> str:
    """Where XLA's report for the same module is: ``...after_optimizations-<report>.txt``
    next to a dump, or ``NAME.<report>.txt`` next to ``NAME.hlo``."""
    if _HLO_SUFFIX.search(hlo_path):
        return _HLO_SUFFIX.sub(f"after_optimizations-{report}.txt", hlo_path)
    return os.path.splitext(hlo_path)[0] + f".{report}.txt"


def _beside(hlo_path: str, report: str) -> str | None:
    candidate = _beside_path(hlo_path, report)
    return _read(candidate) if os.path.lexists(candidate) else None


def analyze_hlo_file(path: str, settings: Settings, name: str | None = None) -> TargetReport:
    from ..passes.hlo.errors import HloParseError
    from ..passes.hlo.memory import MalformedReport

    text = _read(path)
    try:
        return analyze_hlo_only(
            name or _dump_module_name(path), text, platform="as dumped (compiled HLO)",
            buffer_assignment_text=_beside(path, "buffer-assignment"),
            live_range_text=_beside(path, "live-range"), config=settings.pass_config(),
        )
    except HloParseError as e:
        raise ShardLintInputError(path, f"not compiled HLO text: {e}") from None
    except MalformedReport as e:
        raise ShardLintInputError(_beside_path(path, "buffer-assignment"), str(e)) from None


def _dump_module_name(path: str) -> str:
    base = os.path.basename(path)
    m = re.match(r"module_\d+\.(.+?)\.(?:[\w.]*_)?after_optimizations\.txt$", base)
    return m.group(1) if m else os.path.splitext(base)[0]


def _numbered_module_name(path: str) -> str:
    """``module_0038.jit_f``: the dump's module number with the function's name."""
    m = re.match(r"(module_\d+)\.", os.path.basename(path))
    return f"{m.group(1)}.{_dump_module_name(path)}" if m else _dump_module_name(path)


def dump_directory_modules(path: str) -> list[str]:
    # Regular files only: a folder or a dangling link named like a module is not one.
    files = sorted(f for f in glob.glob(os.path.join(path, "*after_optimizations.txt")) if os.path.isfile(f))
    if not files:
        raise ShardLintInputError(path, "no *after_optimizations.txt in this XLA dump directory")
    return files


def read_export(path: str) -> tuple[str, int]:
    """StableHLO text and device count of a ``jax.export`` serialized artifact."""
    data = read_input_bytes(path)
    try:
        exported = jax_adapter.deserialize_export(data)
    except Exception as e:
        raise ShardLintInputError(path, f"not a jax.export artifact: {one_line(e)}") from None
    try:  # the module's bytecode is deserialised only here: a damaged one fails now
        text = exported.mlir_module()
    except Exception as e:
        raise ShardLintInputError(path, f"a damaged jax.export artifact: its StableHLO does not load "
                                  f"({one_line(e)})") from None
    check_mlir_text(path, text)
    return text, exported.nr_devices


def kind_of(path: str) -> str:
    if os.path.isdir(path):
        return "dump"
    if path.endswith(".mlir"):
        return "mlir"
    if _HLO_SUFFIX.search(path) or path.endswith(".hlo"):
        return "hlo"
    return "export"


def snapshot_platform(mlir_path: str) -> str | None:
    """The platform a snapshot was taken on, from the metadata beside it."""
    meta = os.path.splitext(mlir_path)[0] + ".meta.json"
    if not os.path.isfile(meta):
        return None
    import json

    try:
        with open(meta, encoding="utf-8") as f:
            return str(json.load(f).get("platform", "")) or None
    except (OSError, ValueError):
        return None


def check_path(path: str, settings: Settings, devices: list | None = None) -> list[TargetReport]:
    """Analyse one checked-in program (or every module of a dump directory) on
    the run's devices."""
    kind = kind_of(path)
    if kind != "dump":
        check_input_file(path)
    isolation.phase(path, "reading it")
    if kind == "dump":
        files = dump_directory_modules(path)
        names = [_dump_module_name(f) for f in files]
        # A function compiled twice (module_0000.jit_f, module_0038.jit_f) is two
        # programs: each keeps the dump's own module number in its name.
        return [analyze_hlo_file(f, settings, name if names.count(name) == 1 else _numbered_module_name(f))
                for f, name in zip(files, names)]
    if kind == "hlo":
        return [analyze_hlo_file(path, settings)]
    if kind == "mlir":
        module, text = read_mlir(path)
        name = os.path.splitext(os.path.basename(path))[0]
        n = read_entry_signature(module).num_partitions
    else:
        text, n = read_export(path)
        name = os.path.splitext(os.path.basename(path))[0]
    check_device_count(path, n)
    pool = devices if devices is not None else jax_adapter.cpu_devices()
    if n > len(pool):
        raise ShardLintInputError(path, f"needs {n} devices; run with --devices {n} or more")
    report, _, _ = analyze_text(name, text, settings, path, devices=pool)
    taken_on = snapshot_platform(path) if kind == "mlir" else None
    if taken_on and not taken_on.startswith("cpu") and settings.platform == "cpu":
        report = report.model_copy(update={"warnings": [
            f"this snapshot was taken on {taken_on} but these figures come from a CPU compile; "
            f"use --platform {taken_on.split()[0]}"]})
    return [report]
