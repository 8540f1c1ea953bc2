"""``snapshot``, ``check`` and ``gate``: programs checked in as fixtures, their
analysis kept as a baseline, and a merge check against it that never runs the
model code of the change under review (``check`` and a bare ``gate`` read only
the fixture files)."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, replace

from pydantic import ValidationError

from ...passes.models.gate import BASELINE_VERSION, Baseline, GateResult, GateThresholds
from ...passes.models.report import LintReport, TargetReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.gate import baseline_of as pipeline_baseline_of
from ...passes.pipelines.gate import gate_verdict
from ...passes.pipelines.lint import LINT
from ...passes.pipelines.rule_stage import report_rules
from ...reports.common.json import render_json
from .. import __version__
from ..adapter import jax_adapter
from ..backend.checked_fixes import checked_fixes
from ..backend.checked_in_check import check_path
from ..backend.run_target import resolve_run_target
from ..backend.script_targets import load_script_targets
from ..backend.side_by_side import one_compile_per_program
from ..context.config import Settings, library_folders
from ..context.display_paths import relativize
from ..errors import ShardLintInputError
from ..executors.checked_in_tasks import Spread, check_paths
from ..inputs.checked_in import kind_of, read_export, read_mlir, snapshot_code_owners, snapshot_order
from ..inputs.files import MAX_BASELINE_BYTES, is_plain_file_name, open_output, read_input_text
from ..inputs.limits import check_device_count
from .lint import LintRequest, lint

BASELINE_FILE = "baseline.json"


def _versions() -> dict:
    jax_version, jaxlib_version = jax_adapter.versions()
    return {"tool_version": __version__, "jax_version": jax_version, "jaxlib_version": jaxlib_version}


def baseline_of(reports: list[TargetReport]) -> Baseline:
    return pipeline_baseline_of(reports, _versions(), jax_adapter.compiler_versions())


def write_baseline(baseline: Baseline, path: str) -> None:
    with open_output(path, "--baseline") as f:
        f.write(render_json(baseline))


def baseline_path(path: str) -> str:
    return os.path.join(path, BASELINE_FILE) if os.path.isdir(path) else path


def read_baseline(path: str) -> Baseline:
    file = baseline_path(path)
    if not os.path.exists(file):
        raise ShardLintInputError(file, "no such baseline (create one with jax-shard-lint snapshot)")
    text = read_input_text(file, MAX_BASELINE_BYTES, strict=True)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardLintInputError(file, f"not a jax-shard-lint baseline: invalid JSON at line {e.lineno}") from None
    except RecursionError:
        raise ShardLintInputError(file, "not a jax-shard-lint baseline: nested too deeply") from None
    if not isinstance(data, dict) or "baseline_version" not in data:
        raise ShardLintInputError(file, "not a jax-shard-lint baseline: no baseline_version")
    if data["baseline_version"] != BASELINE_VERSION:
        raise ShardLintInputError(
            file, f"baseline version {data['baseline_version']} is not supported (this jax-shard-lint reads "
            f"version {BASELINE_VERSION}); regenerate it with jax-shard-lint gate --update"
        )
    try:
        return Baseline.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ShardLintInputError(file, f"not a jax-shard-lint baseline: {where}: {err['msg']}") from None


@dataclass(frozen=True)
class SnapshotRequest:
    script: str
    out_dir: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()


def snapshot(request: SnapshotRequest, settings: Settings) -> LintReport:
    """Write each target's StableHLO and metadata, and the baseline of all of them."""
    try:
        os.makedirs(request.out_dir, exist_ok=True)
    except OSError as e:  # a read-only folder, a missing parent on /proc, a file in the way
        raise ShardLintInputError("-o", f"cannot create the folder {request.out_dir}: {e.strerror or e}") from None
    loaded = load_script_targets(request.script, request.targets, request.params, settings)
    where, targets = loaded.where, loaded.targets
    for name in targets:
        # The target's name becomes a file name (and, read back, the target's name again):
        # never a path, never hidden.
        if not is_plain_file_name(name):
            raise ShardLintInputError(where, f"target name {name!r} cannot be a snapshot file name: use letters, "
                                      "digits, '_', '.' and '-'")
    for name, lowered in targets.items():
        with open_output(os.path.join(request.out_dir, f"{name}.mlir")) as f:
            f.write(jax_adapter.stablehlo_text(lowered))
    # The target resolved for the targets above: lint takes it as it is.
    report = lint(LintRequest(request.script, tuple(targets), request.params, figures_only=True), loaded.settings)
    for order, t in enumerate(report.targets):
        # ``order``: the target's place in the script's (lint's) order, which check and gate list them in.
        meta = {"target": t.name, "order": order, "mesh": t.mesh, "num_devices": t.num_devices, "platform": t.platform,
                # What the user donated, jit's dropped donations included (the module holds only the rest).
                "donated_inputs": sorted(i.index for i in t.inputs if i.donated),
                # Whose code a location is: check runs no script, so it cannot find them itself.
                "user_roots": list(loaded.settings.user_roots),
                "library_folders": list(library_folders(loaded.settings)), **_versions()}
        with open_output(os.path.join(request.out_dir, f"{t.name}.meta.json")) as f:
            f.write(json.dumps(meta, indent=2) + "\n")
    write_baseline(baseline_of(report.targets), os.path.join(request.out_dir, BASELINE_FILE))
    return report


def check(paths: list[str], settings: Settings, spread: Spread | None = None) -> LintReport:
    """Analyse fixture files without executing any Python from them: here, or (``spread``) each
    path in a child process or a Ray task."""
    spread = spread or Spread()
    paths = [f for p in paths for f in _fixtures_of(p)]
    needed = 0
    for p in paths:
        if p.endswith(".mlir") and os.path.isfile(p):
            n = entry_signature(read_mlir(p)[0], LINT).num_partitions
            check_device_count(p, n)  # before the devices are made: 100,000 CPU devices end the process
            needed = max(needed, n)
    settings, devices = resolve_run_target(settings, needed)
    if spread.executor.in_process or len(paths) < 2:
        reports = []
        for p in paths:
            mine = snapshot_ownership(p, settings)
            with one_compile_per_program():  # a program two checks arrive at is compiled once
                reports += checked_in_fixes(p, check_path(p, mine, devices), mine, devices)
    else:
        reports = _check_spread(paths, settings, spread)
    names = [r.name for r in reports]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ShardLintInputError(paths[0], f"two fixtures are both named {dupes[0]!r}")
    report = LintReport(**_versions(), command="check", script=None, targets=reports,
                        rules=report_rules(settings.ignore, settings.severities))
    return relativize(report, os.getcwd())


def snapshot_ownership(path: str, settings: Settings) -> Settings:
    """The settings ``check`` reads a snapshot with: its locations are the user's and the libraries' as the
    snapshot's own run decided (a library pip installed beside the script is not the user's code, which a
    location alone does not say); the run's settings where the snapshot recorded none."""
    user_roots, libraries = snapshot_code_owners(path) if kind_of(path) == "mlir" else ((), ())
    if not user_roots and not libraries:
        return settings
    return replace(settings, user_roots=settings.user_roots + user_roots,
                   third_party=settings.third_party + tuple(f for f in libraries if f not in settings.third_party))


def checked_in_fixes(path: str, reports: list[TargetReport], settings: Settings, devices: list
                     ) -> list[TargetReport]:
    """check's report of a StableHLO program (a snapshot's .mlir, a jax.export) with its fixes compiled as
    lint compiles them (the same fix-check pipeline, no Python run), so lint and check give one
    recommendation for a value; a compiled HLO's fixes cannot be applied and stay unchecked."""
    kind = kind_of(path) if os.path.isfile(path) else "dump"
    if not settings.check_fixes or kind not in ("mlir", "export") or len(reports) != 1:
        return reports
    text = read_mlir(path)[1] if kind == "mlir" else read_export(path)[0]
    n = entry_signature(jax_adapter.parse_stablehlo(text), LINT).num_partitions
    return [checked_fixes(reports[0], text, settings, path, devices[:n])]


def _check_spread(paths: list[str], settings: Settings, spread: Spread) -> list[TargetReport]:
    """Each path's ``check`` in a child process or a Ray task; the first path that fails is the
    run's one-line error, as here."""
    reports: list[TargetReport] = []
    for path, result in zip(paths, check_paths(paths, settings, spread)):
        if result.error is not None:
            raise ShardLintInputError(path, result.error)
        reports += result.reports
    return reports


def snapshot_fixtures(directory: str) -> list[str]:
    """The folder's ``.mlir`` files in the order snapshot took them (the script's, as lint lists the targets;
    the metadata's ``order``), those without one after them by name."""
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".mlir"))
    orders = {f: snapshot_order(f) for f in files}
    return sorted(files, key=lambda f: (orders[f] is None, orders[f] or 0))


def _fixtures_of(path: str) -> list[str]:
    """A folder of StableHLO fixtures (``snapshot -o DIR`` writes one) stands for its ``.mlir``
    files; any other path, an XLA dump folder included, for itself."""
    if os.path.isdir(path) and not glob.glob(os.path.join(path, "*after_optimizations.txt")):
        fixtures = [f for f in snapshot_fixtures(path) if os.path.isfile(f)]
        if fixtures:
            return fixtures
    return [path]


@dataclass(frozen=True)
class GateRequest:
    baseline: str
    paths: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    update: bool = False
    targets: tuple[str, ...] = ()
    platform_given: bool = False
    rebaseline_on_compiler_change: bool = False
    spread: Spread = Spread()


def gate(request: GateRequest, settings: Settings, thresholds: GateThresholds) -> tuple[GateResult, LintReport]:
    file = baseline_path(request.baseline)
    baseline = None if request.update and not os.path.exists(file) else read_baseline(request.baseline)
    paths = list(request.paths)
    if not paths:
        if not os.path.isdir(request.baseline):
            raise ShardLintInputError(request.baseline, "gate with no SCRIPT or PATH needs the snapshot directory")
        paths = snapshot_fixtures(request.baseline)
        if not paths:
            raise ShardLintInputError(request.baseline, "no .mlir snapshots in this directory")
        from ..inputs.checked_in import snapshot_platform
        from ..platforms.gpu_targets import ACCELERATOR_TARGETS

        taken = {(snapshot_platform(p) or "cpu").split()[0] for p in paths}
        if not request.platform_given and len(taken) == 1 and next(iter(taken)) in ACCELERATOR_TARGETS:
            # Compare like with like: re-analyse the snapshots for the GPU they were taken for.
            settings = replace(settings, platform=next(iter(taken)))
    scripts = [p for p in paths if p.endswith(".py") or ":" in os.path.basename(p)]
    if scripts and len(paths) > 1:
        raise ShardLintInputError(scripts[0], "gate takes one script, or fixture paths, not both")
    for option, given in (("--set", request.params), ("--target", request.targets)):
        if given and not scripts:
            # Fixtures are programs already lowered: an option of the script cannot change them, and
            # a gate that re-read them would pass a change it never saw.
            raise ShardLintInputError(option, "needs a SCRIPT: the fixtures are programs already lowered; "
                                      "give the script to gate it with this option")
    if scripts:
        if request.targets and request.update:
            raise ShardLintInputError("--target", "--update rewrites the whole baseline: gate every target to "
                                      "update it (drop --target)")
        current = lint(LintRequest(scripts[0], request.targets, request.params), settings)
        if request.targets and baseline is not None:
            # The targets not gated are not gone: the baseline is compared on the ones named.
            baseline = baseline.model_copy(update={"targets": {
                k: v for k, v in baseline.targets.items() if k in request.targets}})
    else:
        current = check(paths, settings, request.spread)
    summary = baseline_of(current.targets)
    result = gate_verdict(baseline, summary, thresholds, file, request.update,
                          request.rebaseline_on_compiler_change, lambda b: write_baseline(b, file))
    return result, current
