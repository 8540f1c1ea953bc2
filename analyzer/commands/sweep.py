"""``jax-shard-lint sweep``: compile a script's targets for several meshes or
parameter values and rank them by estimated step time among those that fit.

The script declares what varies: ``shard_lint_targets(mesh_shape=(4, 2), ...)``
takes ``--mesh 4x2`` as ``mesh_shape=(4, 2)``; ``--grid batch=16,32`` varies any
other parameter. Without either, the script's own targets are the candidates
(two shardings of one step, say). Each candidate is a whole lint run: in this
process one after another, or with ``--jobs N`` in N child processes at once.
"""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from math import prod
from typing import Any

from ...passes.compare.sweep import candidate_from_report, failed_candidate, rank
from ...passes.models.sweep import SweepCandidate, SweepRun
from .. import __version__
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..inputs.scripts import parse_params

MAX_CANDIDATES = 256


@dataclass(frozen=True)
class SweepRequest:
    script: str
    meshes: tuple[str, ...] = ()
    grid: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    jobs: int = 1
    mesh_param: str = "mesh_shape"


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


def _set_args(params: dict[str, Any]) -> list[str]:
    return [arg for k, v in params.items() for arg in ("--set", f"{k}={v!r}")]


def _in_process(request: SweepRequest, params: dict[str, Any], settings: Settings):
    from .lint import LintRequest, lint

    merged = list(request.params) + [f"{k}={v!r}" for k, v in params.items()]
    return lint(LintRequest(request.script, request.targets, tuple(merged)), settings)


def _in_child(request: SweepRequest, params: dict[str, Any], cli_args: list[str]):
    """One candidate in a child process: the same lint, as JSON."""
    from ...passes.models.report import LintReport

    argv = [sys.executable, "-P", "-m", "jax_shard_lint.analyzer.cli.main", "lint", request.script, "--format", "json",
            "--fail-on", "never", "-q", *cli_args, *_set_args(params)]
    for t in request.targets:
        argv += ["--target", t]
    for p in request.params:
        argv += ["--set", p]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("jax-shard-lint: ")]
        raise ShardLintInputError(request.script, (lines[-1] if lines else f"exit {done.returncode}")
                                  .removeprefix("jax-shard-lint: error: "))
    return LintReport.model_validate(json.loads(done.stdout))


def sweep(request: SweepRequest, settings: Settings, cli_args: list[str] | None = None,
          progress=None) -> SweepRun:
    from ..backend.device_selection import platform_label, select_run_devices

    say = progress or (lambda _msg: None)
    settings, selected = select_run_devices(settings)
    combos = candidates(request, len(selected) if selected else settings.devices)

    def run_one(params: dict[str, Any]) -> list[SweepCandidate]:
        say(f"compiling {', '.join(f'{k}={v!r}' for k, v in params.items()) or 'the targets'}")
        try:
            if request.jobs > 1:
                report = _in_child(request, params, cli_args or [])
            else:
                report = _in_process(request, params, settings)
        except ShardLintInputError as e:
            return [failed_candidate(params, e.problem)]
        return [candidate_from_report(params, t, settings.budget_bytes) for t in report.targets]

    if request.jobs > 1 and len(combos) > 1:
        with ThreadPoolExecutor(max_workers=request.jobs) as pool:
            results = list(pool.map(run_one, combos))
    else:
        results = [run_one(p) for p in combos]
    jax_version, jaxlib_version = jax_adapter.versions()
    return SweepRun(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version, script=request.script,
        platform=platform_label(settings), budget_bytes=settings.budget_bytes,
        candidates=rank([c for found in results for c in found]),
    )
