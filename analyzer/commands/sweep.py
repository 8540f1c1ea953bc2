"""``jax-shard-lint sweep``: compile a script's targets for several meshes or
parameter values and rank them by estimated step time among those that fit.

The script declares what varies: ``shard_lint_targets(mesh_shape=(4, 2), ...)``
takes ``--mesh 4x2`` as ``mesh_shape=(4, 2)``; ``--grid batch=16,32`` varies any
other parameter. Without either, the script's own targets are the candidates
(two shardings of one step, say). Each candidate is a whole lint run: in this
process one after another, with ``--jobs N`` in N child processes at once, or with
``--executor ray`` as Ray tasks on a cluster (analyzer/executors). Wherever it ran, a
candidate's figures are the same; only the ``execution`` part of the report (where
and how long) differs.
"""

from __future__ import annotations

import ast
import itertools
import json
import time
from dataclasses import dataclass
from math import prod
from typing import Any, Literal

from ...passes.models.sweep import CandidateRun, SweepExecution, SweepRun, params_label
from ...passes.pipelines.sweep import CompiledSetting
from ...passes.pipelines.sweep import sweep as pipeline_sweep
from .. import __version__
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..executors.candidates import CandidateOutcome, CandidateTask, lint_argv
from ..executors.checked_in_tasks import given_target
from ..executors.choice import ExecutorChoice, run_tasks
from ..inputs.scripts import parse_params

MAX_CANDIDATES = 256
Executor = Literal["in-process", "local", "ray"]


@dataclass(frozen=True)
class SweepRequest:
    script: str
    meshes: tuple[str, ...] = ()
    grid: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    mesh_param: str = "mesh_shape"
    executor: ExecutorChoice = ExecutorChoice()


def parse_mesh(text: str) -> tuple[int, ...]:
    parts = text.lower().replace(",", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts if p.strip())
    except ValueError:
        raise ShardLintInputError("--mesh", f"expected a shape like 4x2, got {text!r}") from None
    if not shape or any(d < 1 for d in shape):
        raise ShardLintInputError("--mesh", f"expected positive sizes like 4x2, got {text!r}")
    return shape


def parse_grid(items: tuple[str, ...]) -> list[tuple[str, list[Any]]]:
    """``--grid batch=16,32`` -> [("batch", [16, 32])]; values are Python literals
    where they parse (a tuple needs brackets: ``--grid shape=(4,2);(2,4)`` with ``;``)."""
    out = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier() or not values.strip():
            raise ShardLintInputError("--grid", f"expected NAME=V1,V2,..., got {item!r}")
        parts = values.split(";") if ";" in values else values.split(",")
        parsed = []
        for v in parts:
            try:
                parsed.append(ast.literal_eval(v.strip()))
            except (ValueError, SyntaxError):
                parsed.append(v.strip())
        out.append((key, parsed))
    return out


def candidates(request: SweepRequest, num_devices: int | None) -> list[dict[str, Any]]:
    axes: list[tuple[str, list[Any]]] = []
    if request.meshes:
        shapes = [parse_mesh(m) for m in request.meshes]
        if num_devices is not None:
            for text, shape in zip(request.meshes, shapes):
                if prod(shape) != num_devices:
                    raise ShardLintInputError("--mesh", f"{text} has {prod(shape)} devices; the run compiles for "
                                              f"{num_devices} (--devices or the target's topology)")
        axes.append((request.mesh_param, shapes))
    axes += parse_grid(request.grid)
    names = [k for k, _ in axes]
    if len(set(names)) != len(names):
        raise ShardLintInputError("--grid", f"a parameter is varied twice: {', '.join(names)}")
    combos = [dict(zip(names, values)) for values in itertools.product(*(v for _, v in axes))] or [{}]
    if len(combos) > MAX_CANDIDATES:
        raise ShardLintInputError("--grid", f"{len(combos)} candidates; at most {MAX_CANDIDATES} per sweep")
    fixed = parse_params(list(request.params))
    clash = sorted(set(fixed) & set(names))
    if clash:
        raise ShardLintInputError("--set", f"{clash[0]} is also varied by --mesh/--grid")
    return combos


def _in_process(request: SweepRequest, params: dict[str, Any], settings: Settings):
    from .lint import LintRequest, lint

    merged = list(request.params) + [f"{k}={v!r}" for k, v in params.items()]
    return lint(LintRequest(request.script, request.targets, tuple(merged)), settings)


def _setting_of(params: dict[str, Any], report_json: str | None, error: str | None) -> CompiledSetting:
    from ...passes.models.report import LintReport

    if error is not None or report_json is None:
        return CompiledSetting(params, None, error)
    return CompiledSetting(params, LintReport.model_validate(json.loads(report_json)).targets)


def _run_of(label: str, params: dict[str, Any], outcome: CandidateOutcome) -> CandidateRun:
    return CandidateRun(label=label, params=params, worker=outcome.worker, seconds=round(outcome.seconds, 3),
                        overhead_seconds=round(outcome.overhead_seconds, 3))


def _execution(executor: Executor, workers: int, wall: float, runs: list[CandidateRun],
               startup: float = 0.0) -> SweepExecution:
    total = sum(r.seconds for r in runs)
    return SweepExecution(
        executor=executor, workers=workers, startup_seconds=round(startup, 3), wall_seconds=round(wall, 3),
        candidate_seconds=round(total, 3),
        speedup=round(total / wall, 3) if wall > 0 else 1.0,
        mean_overhead_seconds=round(sum(r.overhead_seconds for r in runs) / len(runs), 3) if runs else 0.0,
        runs=runs)


def _sweep_in_process(request: SweepRequest, combos: list[dict[str, Any]], settings: Settings,
                      say) -> tuple[list[CompiledSetting], SweepExecution]:
    found: list[CompiledSetting] = []
    runs = []
    began = time.monotonic()
    for k, params in enumerate(combos):
        label = params_label(params) or "the targets"
        say(f"[{k + 1}/{len(combos)}] compiling {label}")
        started = time.monotonic()
        try:
            report = _in_process(request, params, settings)
            found.append(CompiledSetting(params, report.targets))
        except ShardLintInputError as e:
            found.append(CompiledSetting(params, None, str(e)))
        runs.append(CandidateRun(label=label, params=params, worker="this process",
                                 seconds=round(time.monotonic() - started, 3), overhead_seconds=0.0))
    return found, _execution("in-process", 1, time.monotonic() - began, runs)


def _sweep_in_children(request: SweepRequest, combos: list[dict[str, Any]], settings: Settings,
                       cli_args: list[str], say) -> tuple[list[CompiledSetting], SweepExecution]:
    tasks = [CandidateTask(k, params_label(params) or "the targets",
                           lint_argv(request.script, request.targets,
                                     list(request.params) + [f"{n}={v!r}" for n, v in params.items()],
                                     cli_args + given_target(settings)))
             for k, params in enumerate(combos)]
    finished = []

    def on_done(outcome: CandidateOutcome) -> None:
        finished.append(outcome.index)
        what = "failed" if outcome.error else "compiled"
        say(f"[{len(finished)}/{len(tasks)}] {tasks[outcome.index].label}: {what} in {outcome.seconds:.1f} s on "
            f"{outcome.worker}")

    from ..executors.bundle import make_bundle

    def bundle():
        made = make_bundle(request.script, [settings.config_file or "", settings.target_config or ""])
        say(f"sending {len(tasks)} candidate(s) to Ray with {len(made.files)} file(s) of the script's folder")
        return made

    ran = run_tasks(request.executor, tasks, bundle, on_done)
    outcomes = ran.outcomes
    found = [_setting_of(params, o.report_json, o.error) for params, o in zip(combos, outcomes)]
    runs = [_run_of(t.label, params, o) for t, params, o in zip(tasks, combos, outcomes)]
    return found, _execution(request.executor.kind, ran.workers, ran.wall_seconds, runs, ran.startup_seconds)


def sweep(request: SweepRequest, settings: Settings, cli_args: list[str] | None = None,
          progress=None) -> SweepRun:
    from ..backend.device_selection import platform_label
    from ..backend.run_target import resolve_run_target

    say = progress or (lambda _msg: None)
    settings, selected = resolve_run_target(settings)
    combos = candidates(request, len(selected) if selected else settings.devices)
    if request.executor.in_process:
        ranked, execution = pipeline_sweep(lambda: _sweep_in_process(request, combos, settings, say),
                                           settings.budget_bytes)
    else:
        ranked, execution = pipeline_sweep(
            lambda: _sweep_in_children(request, combos, settings, cli_args or [], say), settings.budget_bytes)
    jax_version, jaxlib_version = jax_adapter.versions()
    return SweepRun(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version, script=request.script,
        platform=platform_label(settings), budget_bytes=settings.budget_bytes,
        candidates=ranked, execution=execution,
    )
