"""``jax-shard-lint propagate``: our sharding propagation on a script's targets
or a ``.mlir`` file, with provenance, predicted communication matched against
the compiled program, and agreement with Shardy."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...passes.models.entry import EntrySignature
from ...passes.models.errors import ShardyRejected
from ...passes.models.propagation import PropagateRun, PropagationReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.propagate import (
    MAX_VALUES,
    PROPAGATE,
    CompiledProgram,
    CompileModule,
    Propagated,
    devices_needed,
    propagate_module,
)
from .. import __version__
from ..adapter import jax_adapter
from ..backend import compile_memo
from ..backend.device_selection import device_processes
from ..backend.run_target import resolve_run_target
from ..backend.script_targets import load_script_targets
from ..context.config import Settings
from ..context.display_paths import relativize
from ..errors import ShardLintInputError, one_line
from ..inputs.checked_in import read_mlir
from ..inputs.limits import MAX_DEVICES
from ..supervision import isolation


@dataclass(frozen=True)
class PropagateRequest:
    path: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    compile: bool = True
    all_values: bool = False


@dataclass(frozen=True)
class MlirDevices:
    """The devices a checked-in module states, as the front end made them at the command's start, or None
    and why not (``not_made``): a module too large to make devices for, or whose devices cannot be made,
    still propagates."""

    needed: int
    devices: list | None
    not_made: str | None = None


def _mlir_devices(module, sig: EntrySignature, settings: Settings) -> MlirDevices:
    needed = devices_needed(module, sig)
    if needed > MAX_DEVICES:
        return MlirDevices(needed, None, f"it needs {needed} devices, more than the {MAX_DEVICES} made for a module")
    try:
        _, devices = resolve_run_target(settings, needed)
    except ShardLintInputError as e:
        return MlirDevices(needed, None, f"its {needed} devices could not be made: {e.problem}")
    return MlirDevices(needed, devices)


def _compile_mlir(request: PropagateRequest, made: MlirDevices, text: str) -> CompileModule:
    """The module compiled on the devices made for it, for its collectives, or None and why not: a module XLA
    cannot compile (or whose devices were not made) still propagates."""

    def compile_module(sig: EntrySignature) -> tuple[CompiledProgram | None, str | None]:
        if made.devices is None:
            return None, made.not_made
        isolation.phase(request.path, "compiling the module with XLA")
        try:
            program = jax_adapter.compile_stablehlo_text(
                text, made.needed, sig.mesh.axes, sig.mesh.device_ids, with_reports=False, devices=made.devices,
                optimize_machine_code=False)  # read, never run
        except Exception as e:
            return None, f"XLA could not compile it: {one_line(e)}"
        return CompiledProgram(program.hlo_text), None

    return compile_module


def propagate_mlir(request: PropagateRequest, settings: Settings) -> list[tuple[PropagationReport, Propagated]]:
    module, text = read_mlir(request.path)
    name = os.path.splitext(os.path.basename(request.path))[0]
    sig = entry_signature(module, PROPAGATE)
    # The devices the module states, made here, once, as every command makes its target at its start.
    made = _mlir_devices(module, sig, settings) if request.compile else None
    compile_module = _compile_mlir(request, made, text) if made is not None else None

    def then_propagate(sig: EntrySignature) -> tuple[CompiledProgram | None, str | None]:
        compiled = compile_module(sig) if compile_module is not None else (None, None)
        isolation.phase(request.path, "propagating shardings (and running Shardy's pipeline to compare)")
        return compiled

    report, propagated, not_compiled = _report(name, module, then_propagate, request, settings, request.path, "",
                                               sig)
    return [(report.model_copy(update={"not_compiled": not_compiled}), propagated)]


def _report(name: str, module, compile_module: CompileModule | None, request: PropagateRequest,
            settings: Settings, where: str, whose: str, entry: EntrySignature | None = None,
            ) -> tuple[PropagationReport, Propagated, str | None]:
    """The propagate pipeline over one module (``entry``: its entry signature, when already read); a module
    Shardy's passes refuse is the user's input, one line naming it (``whose``: the target's, for a script's)."""
    try:
        return propagate_module(name, module, compile_module, ownership=settings.pass_config.ownership,
                                max_values=None if request.all_values else MAX_VALUES, entry=entry)
    except ShardyRejected as e:
        raise ShardLintInputError(where, f"{whose}Shardy rejects the module: {e}") from e


def propagate_script(request: PropagateRequest, settings: Settings) -> list[tuple[PropagationReport, Propagated]]:
    loaded = load_script_targets(request.path, request.targets, request.params, settings)
    where, targets = loaded.where, loaded.targets
    out = []
    for name, lowered in targets.items():
        module = jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered))
        compile_module = _compile_lowered(name, lowered, settings, where) if request.compile else None
        report, propagated, _ = _report(name, module, compile_module, request, settings, where,
                                        f"target {name!r}: ")
        out.append((report, propagated))
    return out


def _compile_lowered(name: str, lowered, settings: Settings, where: str) -> CompileModule:
    """One compile without XLA's memory reports, and no lint passes (propagate needs only the
    collectives)."""

    def compile_module(_sig: EntrySignature) -> tuple[CompiledProgram | None, str | None]:
        try:
            program = compile_memo.compile_lowered(lowered, settings, with_reports=False, optimize_machine_code=False)
        except Exception as e:  # XLA rejects the program: the user's input
            raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}") from e
        return CompiledProgram(program.hlo_text, device_processes(lowered), settings.pass_config.ownership), None

    return compile_module


def propagate(request: PropagateRequest, settings: Settings) -> tuple[PropagateRun, list[Propagated]]:
    if request.path.endswith(".mlir"):
        results = propagate_mlir(request, settings)
        if request.targets and results[0][0].name not in request.targets:
            raise ShardLintInputError(
                request.path, f"unknown target {request.targets[0]!r} (targets: {results[0][0].name})")
    else:
        results = propagate_script(request, settings)
    jax_version, jaxlib_version = jax_adapter.versions()
    run = PropagateRun(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
        script=request.path, targets=[r for r, _ in results],
    )
    return relativize(run, os.getcwd()), [p for _, p in results]
