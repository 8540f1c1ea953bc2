"""``jax-shard-lint propagate``: our sharding propagation on a script's targets
or a ``.mlir`` file, with provenance, predicted communication matched against
the compiled program, and agreement with Shardy."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..passes.models import PropagateRun, PropagationReport
from ..passes.propagation_report import MAX_VALUES, Propagated, build_report
from . import __version__, jax_adapter
from .config import Settings
from .errors import ShardLintInputError, one_line
from .fixtures import read_mlir
from .lint import device_processes, relativize, select_run_devices
from .script_loading import call_targets, load_entry, parse_params, select_targets


@dataclass(frozen=True)
class PropagateRequest:
    path: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    compile: bool = True
    all_values: bool = False


def _mesh_of(module):
    from ..passes.stablehlo_module import read_entry_signature

    return read_entry_signature(module)


def propagate_mlir(request: PropagateRequest, settings: Settings) -> list[tuple[PropagationReport, Propagated]]:
    module, text = read_mlir(request.path)
    sig = _mesh_of(module)
    settings.devices = max(settings.devices, sig.num_partitions)
    devices = select_run_devices(settings)
    compiled = None
    if request.compile:
        from ..passes.collectives import find_collectives
        from ..passes.hlo_text import parse_hlo_module

        try:
            program = jax_adapter.compile_stablehlo_text(
                text, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids, with_reports=False, devices=devices)
        except Exception as e:
            raise ShardLintInputError(request.path, f"failed to compile: {one_line(e)}") from e
        compiled = list(find_collectives(parse_hlo_module(program.hlo_text), sig.mesh).collectives)
    name = os.path.splitext(os.path.basename(request.path))[0]
    return [build_report(name, module, compiled, ownership=settings.ownership(),
                         max_values=None if request.all_values else MAX_VALUES)]


def propagate_script(request: PropagateRequest, settings: Settings) -> list[tuple[PropagationReport, Propagated]]:
    devices = select_run_devices(settings)
    fn, where = load_entry(request.path)
    targets = select_targets(
        call_targets(fn, where, parse_params(list(request.params)), extra={"mesh_devices": devices}),
        list(request.targets), where)
    out = []
    for name, lowered in targets.items():
        module = jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered))
        compiled = _compiled_collectives(name, lowered, module, settings, where) if request.compile else None
        out.append(build_report(name, module, compiled, ownership=settings.ownership(),
                                max_values=None if request.all_values else MAX_VALUES))
    return out


def _compiled_collectives(name: str, lowered, module, settings: Settings, where: str):
    """The compiled program's collectives: one compile without XLA's memory
    reports, and no lint passes (propagate needs only the collectives)."""
    from ..passes.collectives import find_collectives
    from ..passes.hlo_text import parse_hlo_module
    from ..passes.stablehlo_module import read_entry_signature

    try:
        program = jax_adapter.compile_lowered(lowered, with_reports=False)
    except Exception as e:  # XLA rejects the program: the user's input
        raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}") from e
    return list(find_collectives(parse_hlo_module(program.hlo_text), read_entry_signature(module).mesh,
                                 device_processes(lowered), settings.ownership()).collectives)


def propagate(request: PropagateRequest, settings: Settings) -> tuple[PropagateRun, list[Propagated]]:
    if request.path.endswith(".mlir"):
        results = propagate_mlir(request, settings)
        if request.targets and results[0][0].name not in request.targets:
            raise ShardLintInputError(request.path, f"unknown target {request.targets[0]!r} (targets: {results[0][0].name})")
    else:
        results = propagate_script(request, settings)
    jax_version, jaxlib_version = jax_adapter.versions()
    run = PropagateRun(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
        script=request.path, targets=[r for r, _ in results],
    )
    return relativize(run, os.getcwd()), [p for _, p in results]
