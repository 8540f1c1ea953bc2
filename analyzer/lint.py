"""One lint run: load the script's targets, lower and compile each, run the
pass pipeline, apply suppressions, and build the report."""

from __future__ import annotations

import os
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from ..passes.common.byte_sizes import format_bytes
from ..passes.common.frames import library_relative
from ..passes.hlo.memory import MemoryStats
from ..passes.models.report import Finding, LintReport, SourceLocation, TargetReport
from ..passes.rules.finding_provenance import EXPLAINED_RULES, attach_provenance
from ..passes.pipeline import CompiledFacts, analyze_target, sort_findings
from ..passes.propagation.predicted_communication import predict
from ..passes.propagation.report import run_propagation
from ..passes.stablehlo.module import read_entry_signature, read_entry_sources
from ..passes.rules.registry import RULES, Emitter, rule_docs
from ..passes.rules.source_rules import check_source
from ..passes.rules.suppressions import Suppression, apply_suppressions, find_suppressions
from . import __version__, isolation, jax_adapter
from . import devices as run_devices
from .config import Settings
from .device_presets import find_preset, target_memory
from .gpu_targets import ACCELERATOR_TARGETS, GPU_TARGETS, TPU_TARGETS, load_target, target_devices
from .tpu_targets import resolve_target, tpu_devices
from .out_shardings import suggest as suggest_out_shardings
from .errors import ShardLintInputError, one_line
from .heap import paused_collector
from .script_loading import call_targets, load_entry, parse_params, select_targets

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LintRequest:
    script: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()


def platform_label(settings: Settings) -> str:
    if settings.platform == "cpu":
        return "cpu (virtual devices)"
    if settings.platform == "gpu":
        return f"gpu ({jax_adapter.device_kind_summary()})"
    if settings.platform in TPU_TARGETS:
        target = resolve_target(settings.platform, settings.devices, settings.topology)
        hosts = len({d.process_index for d in run_devices.selected() or []})
        over = f" over {hosts} hosts" if hosts > 1 else ""
        return (f"{settings.platform} (compiled for {target.num_devices} x {settings.platform.upper()}, topology "
                f"{target.topology_name}{over}, without one)")
    hosts = f", {settings.hosts} hosts" if settings.hosts > 1 else ""
    return f"{settings.platform} (compiled for {settings.devices} x {settings.platform.upper()} without one{hosts})"


def select_run_devices(settings: Settings) -> list:
    """Configure JAX and choose the devices this run compiles for."""
    try:
        jax_adapter.configure_devices(settings.platform, settings.devices)
    except RuntimeError as e:
        raise ShardLintInputError("--devices", str(e)) from None
    if settings.platform in GPU_TARGETS:
        chosen = target_devices(load_target(settings.platform, settings.target_config), settings.devices,
                                settings.hosts)
    elif settings.platform in TPU_TARGETS:
        tpu = resolve_target(settings.platform, settings.devices, settings.topology)
        chosen = tpu_devices(tpu)
        settings.devices, settings.topology = len(chosen), tpu.topology
    elif settings.platform == "gpu":
        chosen = jax_adapter.gpu_devices()
    else:
        chosen = None
    settings.default_budget()  # the commands' settings have it already; a library caller's may not
    run_devices.select(chosen)
    return run_devices.selected()


# A device preset that is no compile target, and the target that compiles for it.
_TARGET_FOR_PRESET = {"h100-nvl": "h100"}


def run_warnings(settings: Settings) -> list[str]:
    """A budget taken from one device's preset while the figures come from
    another platform's compile: said, since the verdict mixes the two."""
    preset = find_preset(settings.budget_source) if settings.budget_source else None
    if preset is None or preset.name == settings.platform:
        return []
    target = _TARGET_FOR_PRESET.get(preset.name, preset.name)
    budget = f"the budget is the {preset.name} preset's ({format_bytes(settings.budget_bytes or preset.memory_bytes)})"
    if settings.platform == "cpu":
        kind = "TPU" if target in TPU_TARGETS else "GPU"
        return [f"{budget} but the figures come from a CPU compile, which can differ a lot from a {kind}'s: use "
                f"--platform {target} for {kind} figures"]
    if settings.platform in ACCELERATOR_TARGETS and target != settings.platform:
        own = target_memory(settings.platform)
        return [f"{budget} but the figures come from a {settings.platform} compile, whose devices have "
                f"{format_bytes(own) if own else 'other memory'}: drop --device (the target's own memory is the "
                f"budget) or compile for it with --platform {target}"]
    return []


def _check_lowered_for(lowered, name: str, settings: Settings, where: str) -> None:
    if settings.platform not in ACCELERATOR_TARGETS:
        return
    assignment = jax_adapter.device_assignment(lowered)
    if assignment and assignment[0].platform == "cpu":
        raise ShardLintInputError(
            where, f"target {name!r} was lowered for CPU devices, not the {settings.platform}'s: build the mesh over "
            "the devices the tool selects (take mesh_devices= in shard_lint_targets, or use "
            "jax_shard_lint.analyzer.mesh(shape, names))"
        )


def _check_platform(settings: Settings) -> int | None:
    """The number of GPUs for --platform gpu; a clear error when there are none."""
    if settings.platform != "gpu":
        return None
    gpus = jax_adapter.gpu_devices()
    if not gpus:
        raise ShardLintInputError(
            "--platform gpu", "JAX sees no GPU (is jax[cuda12] installed and a GPU visible?); "
            "use --platform cpu for virtual CPU devices"
        )
    return len(gpus)


def device_processes(lowered) -> tuple[int, ...] | None:
    """The host of each logical device a program was lowered for, when they span several."""
    processes = tuple(d.process_index for d in jax_adapter.device_assignment(lowered))
    return processes if len(set(processes)) > 1 else None


def compiled_facts(lowered, platform: str) -> CompiledFacts:
    program = jax_adapter.compile_lowered(lowered)
    out_info = _flat_avals(lowered.out_info)
    in_info = _flat_avals(lowered.in_avals)
    return CompiledFacts(
        hlo_text=program.hlo_text,
        platform=platform,
        memory=MemoryStats(**program.memory) if program.memory else None,
        live_range_text=program.live_range_text,
        buffer_assignment_text=program.buffer_assignment_text,
        output_shardings=tuple(
            jax_adapter.sharding_axes(s, len(a.shape)) for s, a in zip(program.output_shardings, out_info)
        ) or None,
        input_shardings=tuple(
            jax_adapter.sharding_axes(s, len(a.shape)) for s, a in zip(program.input_shardings, in_info)
        ) or None,
        device_processes=device_processes(lowered),
        xla_cost=program.cost,
    )


def _flat_avals(tree):
    import jax

    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))


class _Background:
    """A pass run on another thread while XLA compiles (XLA's compile releases the
    GIL): reading the StableHLO's entry signature costs no wall time there."""

    def __init__(self, fn, *args):
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self.thread.start()

    def _run(self, fn, *args):
        try:
            self.result = fn(*args)
        except Exception as e:  # reported when the result is asked for
            self.error = e

    def get(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def _stablehlo_entry(text: str, ownership):
    """What the StableHLO alone tells, on a copy of the module in a context of its
    own (the compile on the main thread uses the original's): the entry signature
    and source lines, and the copy itself, for the propagation behind a finding's
    provenance."""
    module = jax_adapter.parse_stablehlo(text)
    return module, (read_entry_signature(module), read_entry_sources(module, ownership))


def _provenance_facts(module, ownership):
    """Our propagation and its predicted communication, run only when a finding asks
    for its provenance. (It once ran beside every compile, on the second core: XLA's
    CPU compile uses more than one, and the propagation slowed it by 10-20% on the
    scale benchmark's clean programs, which never read it.)"""
    try:
        propagated = run_propagation(module, ownership)
        return propagated, predict(propagated.graph)
    except Exception:  # noqa: BLE001 - an op our propagation cannot follow costs the findings their
        return None, None  # provenance, never the lint (it ran only for them before)


def analyze_lowered(name: str, lowered, settings: Settings, where: str) -> TargetReport:
    module = jax_adapter.stablehlo_module(lowered)
    ownership = settings.ownership()
    background = _Background(_stablehlo_entry, jax_adapter.stablehlo_text(lowered), ownership)
    try:
        facts = compiled_facts(lowered, platform_label(settings))
    except Exception as e:  # XLA rejects the program: the user's input, not our bug
        raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}") from e

    def out_shardings_hook(inputs, outputs, roundtrips):
        s = suggest_out_shardings(lowered, inputs, outputs, roundtrips)
        return s.text, s.problem

    copy, entry = background.get()
    report = analyze_target(name, module, facts, settings.pass_config(), out_shardings_hook, entry)
    if any(f.rule in EXPLAINED_RULES for f in report.findings):
        propagated, predicted = _provenance_facts(copy, ownership)
        if propagated is not None:
            report = attach_provenance(report, propagated, display_source, predicted)
    return report


def _same_file(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def _display_path(path: str, base: str) -> str:
    """Relative to ``base`` beneath it; an installed library's file as its package
    path (``flax/nnx/nn/linear.py``), so reports read the same on every machine."""
    if path.startswith("<"):
        return path
    packaged = library_relative(path)
    if packaged != path:
        return packaged
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute, base)
    return rel if not rel.startswith("..") else absolute


def display_source(src: SourceLocation, base: str | None = None) -> str:
    return f"{_display_path(src.file, base or os.getcwd())}:{src.line}"


def _located_fields(cls: type) -> tuple[str, ...]:
    """The fields of a report model that can hold a SourceLocation, at any depth."""
    hit = _LOCATED.get(cls)
    if hit is None:
        _LOCATED[cls] = ()  # recursion guard
        names = []
        for name, info in cls.model_fields.items():
            todo, found = [info.annotation], False
            while todo and not found:
                t = todo.pop()
                if t is SourceLocation:
                    found = True
                elif isinstance(t, type) and issubclass(t, BaseModel):
                    found = bool(_located_fields(t))
                else:
                    todo.extend(typing.get_args(t))
            if found:
                names.append(name)
        hit = _LOCATED[cls] = tuple(names)
    return hit


_LOCATED: dict[type, tuple[str, ...]] = {}


def relativize(report, base: str):
    """Source paths relative to ``base`` where they lie beneath it, so reports
    read the same on every machine. Only fields that can hold a location are
    walked, and each path is worked out once."""
    paths: dict[str, str] = {}

    def fix(obj):
        if isinstance(obj, SourceLocation):
            shown = paths.get(obj.file)
            if shown is None:
                shown = paths[obj.file] = _display_path(obj.file, base)
            return obj if shown == obj.file else obj.model_copy(update={"file": shown})
        if isinstance(obj, list):
            return [fix(x) for x in obj]
        if isinstance(obj, BaseModel):
            fields = _located_fields(type(obj))
            if not fields:
                return obj
            updates = {k: fix(getattr(obj, k)) for k in fields}
            return obj.model_copy(update=updates)
        return obj

    return fix(report)


def apply_run_suppressions(
    reports: list[TargetReport], files: list[str], settings: Settings, report_unused: bool,
    extra: list[Finding] | None = None,
) -> tuple[list[TargetReport], list[Finding]]:
    """Suppress target findings and run-wide ones (``extra``: the source rules'),
    and report suppressions that silence nothing."""
    suppressions: list[Suppression] = []
    for path in sorted(set(files)):
        try:
            with open(path, encoding="utf-8") as f:
                suppressions.extend(find_suppressions(path, f.read()))
        except OSError:
            continue
    extra = list(extra or [])
    if not suppressions:
        return reports, sort_findings(extra)
    used: set[tuple[str, int, str]] = set()
    out = []
    everything = {(s, c) for s in suppressions for c in (s.codes or ("*",))}
    for rep in reports:
        outcome = apply_suppressions(rep.findings, suppressions, _same_file)
        for s, code in everything - set(outcome.unused):
            used.add((s.file, s.line, code))
        out.append(rep.model_copy(update={"findings": list(outcome.kept), "suppressed": outcome.suppressed}))
    outcome = apply_suppressions(extra, suppressions, _same_file)
    for s, code in everything - set(outcome.unused):
        used.add((s.file, s.line, code))
    run_findings: list[Finding] = list(outcome.kept)
    rule = RULES["SL001"]
    if report_unused and "SL001" not in settings.ignore:
        unused = [
            (s, c) for s in suppressions for c in (s.codes or ("*",))
            if (s.file, s.line, c) not in used and (c == "*" or c not in settings.ignore)
        ]
        emitter = Emitter(rule, settings.severities.get("SL001", rule.severity))
        rule.check(unused, emitter)
        run_findings += emitter.findings
    return out, sort_findings(run_findings)


def local_source_files(script: str) -> list[str]:
    """The script and the modules it imports from beside it (its folder and
    below), found by reading import statements: nothing is imported for this."""
    import ast

    folder = os.path.dirname(os.path.abspath(script))
    found: set[str] = set()
    todo = [os.path.abspath(script)]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        here = os.path.dirname(path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = here if node.level else folder
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    rel = os.path.join(base, *name.split("."))
                    for candidate in (rel + ".py", os.path.join(rel, "__init__.py")):
                        if os.path.isfile(candidate):
                            todo.append(os.path.abspath(candidate))
                continue
            for name in names:
                rel = os.path.join(folder, *name.split("."))
                for candidate in (rel + ".py", os.path.join(rel, "__init__.py")):
                    if os.path.isfile(candidate):
                        todo.append(os.path.abspath(candidate))
    return sorted(p for p in found if p.startswith(folder + os.sep) or p == os.path.abspath(script))


def source_findings(files: list[str], settings: Settings) -> list[Finding]:
    out: list[Finding] = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        out.extend(check_source(path, text, frozenset(settings.ignore), settings.severities).findings)
    return out


def lint(request: LintRequest, settings: Settings, progress: Progress | None = None) -> LintReport:
    say = progress or (lambda _msg: None)
    selected = select_run_devices(settings)
    n_gpus = _check_platform(settings)
    fn, where = load_entry(request.script)
    params = parse_params(list(request.params))
    say(f"collecting targets from {where}")
    try:
        targets = select_targets(
            call_targets(fn, where, params, extra={"mesh_devices": selected}), list(request.targets), where)
    except ShardLintInputError as e:
        if n_gpus is not None and "raised" in e.problem:
            # A mesh larger than the machine fails inside the script; say what the machine has.
            raise ShardLintInputError(e.where, f"{e.problem} (JAX sees {n_gpus} GPUs)") from e
        raise
    reports = []
    for name, lowered in targets.items():
        say(f"compiling {name}")
        isolation.phase(where, f"compiling target {name!r}")
        _check_lowered_for(lowered, name, settings, where)
        with paused_collector():
            report = analyze_lowered(name, lowered, settings, where)
        reports.append(report.model_copy(update={"warnings": report.warnings + run_warnings(settings)}))
    local = local_source_files(where) if os.path.exists(where) else []
    from_source = source_findings(local, settings)
    files = [os.path.abspath(where)] + local + [
        f.source.file for r in reports for f in r.findings if f.source is not None
    ]
    reports, run_findings = apply_run_suppressions(
        reports, files, settings, report_unused=not request.targets, extra=from_source
    )
    jax_version, jaxlib_version = jax_adapter.versions()
    report = LintReport(
        tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
        script=where, targets=reports, findings=run_findings,
        rules=rule_docs(frozenset(settings.ignore), settings.severities),
    )
    return relativize(report, os.getcwd())
