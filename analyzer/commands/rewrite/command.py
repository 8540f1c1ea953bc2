"""``jax-shard-lint rewrite``: pin a target's output shardings in its StableHLO,
recompile, and show what changed (and, with ``--validate``, run both).

The edit is made on the module through jaxlib's MLIR bindings (the entry
function's result ``sdy.sharding`` attributes); Python is not traced again, and
source locations are kept so findings on the rewritten program still point at
the user's lines. Both versions are compiled from StableHLO text the same way,
so their figures compare like for like.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ....passes.common.pytree_paths import path_keys
from ....passes.common.sharding_text import normalized, out_shardings_text
from ....passes.models.entry import EntrySignature, RoundTrip
from ....passes.models.report import TargetReport
from ....passes.models.rewrite import AppliedSharding, RewriteReport, RewriteRun, Validation
from ....passes.pipelines import rewrite as pipeline
from ....passes.pipelines.entry import entry_signature
from ....passes.pipelines.rewrite import REWRITE
from ... import __version__
from ...adapter import jax_adapter
from ...backend.checked_in_analysis import analyze_text
from ...backend.out_shardings import suggest_for
from ...backend.run_target import resolve_run_target
from ...backend.script_targets import load_script_targets
from ...backend.sharding_edits import with_entry_shardings
from ...context.config import Settings
from ...context.display_paths import display_source, relativize
from ...errors import ShardLintInputError, one_line
from ...inputs.checked_in import read_mlir
from ...inputs.limits import check_device_count
from ...platforms.gpu_targets import ACCELERATOR_TARGETS
from ...supervision import isolation

DECLARED_ENTRY = "shard_lint_out_shardings"
INPUTS_ENTRY = "shard_lint_inputs"


@dataclass(frozen=True)
class RewriteRequest:
    path: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()  # PATH=SPEC
    from_inputs: bool = False
    validate: bool = False
    repeats: int = 10
    say: Callable[[str], None] | None = None  # progress lines (--validate runs can take minutes)


def parse_spec(text: str, mesh_axes: dict[str, int], rank: int, where: str) -> list[list[str]]:
    """``P(None, 'x')``, ``PartitionSpec('x', ('y', 'z'))`` or ``None`` (replicated) as
    mesh axes per dimension, checked against the mesh and the output's rank."""
    t = text.strip()
    m = re.fullmatch(r"(?:P|PartitionSpec)\((.*)\)", t, re.S)
    if t in ("None", "P()", "PartitionSpec()"):
        entries: tuple = ()
    elif m:
        try:
            entries = ast.literal_eval(f"({m.group(1)},)") if m.group(1).strip() else ()
        except (ValueError, SyntaxError):
            raise ShardLintInputError(where, f"unreadable PartitionSpec {text!r}") from None
    else:
        raise ShardLintInputError(where, f"expected a PartitionSpec like P(None, 'x'), got {text!r}")
    if len(entries) > rank:
        raise ShardLintInputError(where, f"{text} has {len(entries)} entries but the output has rank {rank}")
    dims: list[list[str]] = []
    used: set[str] = set()
    for e in entries:
        axes = [] if e is None else [e] if isinstance(e, str) else list(e) if isinstance(e, tuple) else None
        if axes is None or not all(isinstance(a, str) for a in axes):
            raise ShardLintInputError(where, f"{text}: each entry must be None, an axis name or a tuple of names")
        for a in axes:
            if a not in mesh_axes:
                raise ShardLintInputError(where, f"{text}: no mesh axis {a!r} (mesh: {', '.join(mesh_axes)})")
            if a in used:
                raise ShardLintInputError(where, f"{text}: axis {a!r} is used twice")
            used.add(a)
        dims.append(axes)
    return dims + [[] for _ in range(rank - len(dims))]


def call_entry(fn, entry: str, params: dict, where: str) -> tuple[bool, object]:
    """(whether the script defines ``entry``, what it returned), called with the
    params it takes; what it raises is one line naming the script."""
    make = getattr(inspect.getmodule(fn), entry, None)
    if make is None:
        return False, None
    accepted = inspect.signature(make).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    try:
        return True, make(**{k: v for k, v in params.items() if takes_any or k in accepted})
    except Exception as e:  # the user's code: one line, not a traceback
        raise ShardLintInputError(where, f"{entry}() raised {one_line(e)}") from e


def _declared(fn, params: dict, where: str) -> dict:
    """``shard_lint_out_shardings(**params)``: {target name: {output path: spec}}."""
    _, result = call_entry(fn, DECLARED_ENTRY, params, where)
    result = result or {}
    if not isinstance(result, dict) or not all(isinstance(v, dict) for v in result.values()):
        raise ShardLintInputError(where, f"{DECLARED_ENTRY}() returned {type(result).__name__}; expected a dict of "
                                  "target name to a dict of output path to PartitionSpec")
    return result


def script_inputs(fn, params: dict, where: str) -> dict:
    """``shard_lint_inputs(**params)`` from the script, when it has one: concrete
    arguments for ``--validate`` per target (``{name: (arg, ...)}``), or one tuple of
    arguments for every target. Without it, validation draws seeded random inputs."""
    defined, result = call_entry(fn, INPUTS_ENTRY, params, where)
    if not defined:
        return {}
    if isinstance(result, dict):
        return dict(result)
    if isinstance(result, (tuple, list)):
        return {"*": tuple(result)}
    raise ShardLintInputError(where, f"{INPUTS_ENTRY}() returned {type(result).__name__}; expected a dict of target "
                              "name to a tuple of arguments, or one tuple of arguments")


def flat_inputs(args, sig, name: str, where: str) -> list:
    """The script's arguments for one target as flat host arrays, checked against
    the program's inputs (count, shape and element type)."""
    import jax

    leaves = [np.asarray(x) for x in jax.tree.leaves(args)]
    if len(leaves) != len(sig.inputs):
        raise ShardLintInputError(where, f"{INPUTS_ENTRY}() gives {len(leaves)} arrays for target {name!r}, which "
                                  f"takes {len(sig.inputs)}")
    for leaf, t in zip(leaves, sig.inputs):
        if tuple(leaf.shape) != tuple(t.shape):
            raise ShardLintInputError(where, f"{INPUTS_ENTRY}() for {name!r}: {t.path} has shape {list(leaf.shape)}, "
                                      f"the program takes {t.shape}")
    return leaves


def _match_output(key: str, report: TargetReport, where: str) -> int:
    key = key.strip()
    if key.isdigit():
        i = int(key)
        if i >= len(report.outputs):
            raise ShardLintInputError(where, f"output {i} does not exist ({len(report.outputs)} outputs)")
        return i
    for o in report.outputs:
        if o.path == key or path_keys(o.path)[1] == path_keys(key)[1]:
            return o.index
    raise ShardLintInputError(
        where, f"no output {key!r} (outputs: {', '.join(o.path for o in report.outputs)})"
    )


def plan(report: TargetReport, sig: EntrySignature, changed: tuple[RoundTrip, ...], request: RewriteRequest,
         declared: dict) -> list[AppliedSharding]:
    """Which outputs get which sharding, and why (``changed``: the round trips whose output leaves on
    another layout than its input came in, the rewrite pipeline's)."""
    mesh = dict(sig.mesh.axes)
    chosen: dict[int, AppliedSharding] = {}
    explicit = bool(request.outs or declared)
    if request.from_inputs or not explicit:
        for rt in changed:
            chosen[rt.output.index] = AppliedSharding(
                path=rt.output.path, index=rt.output.index, before=rt.output.sharding, after=rt.input.sharding,
                why=f"the input it corresponds to, {rt.input.path}",
            )
    for key, spec in declared.items():
        i = _match_output(str(key), report, f"{DECLARED_ENTRY}()")
        o = report.outputs[i]
        text = spec if isinstance(spec, str) else _spec_repr(spec)
        dims = parse_spec(text, mesh, len(o.shape), f"{DECLARED_ENTRY}()")
        chosen[i] = AppliedSharding(path=o.path, index=i, before=o.sharding, after=dims, why="declared by the script")
    for item in request.outs:
        key, sep, spec = item.partition("=")
        if not sep:
            raise ShardLintInputError("--out", f"expected PATH=SPEC, got {item!r}")
        i = _match_output(key, report, "--out")
        o = report.outputs[i]
        dims = parse_spec(spec, mesh, len(o.shape), "--out")
        chosen[i] = AppliedSharding(path=o.path, index=i, before=o.sharding, after=dims, why="--out")
    return [chosen[i] for i in sorted(chosen)]


def _spec_repr(spec) -> str:
    """A jax PartitionSpec (or tuple) as text ``parse_spec`` reads."""
    entries = tuple(spec)
    return "P(" + ", ".join(repr(e) for e in entries) + ")"


def _python_fix(lowered, before: TargetReport, after: TargetReport, pinned: dict,
                roundtrips: tuple[RoundTrip, ...]) -> tuple[str | None, str | None]:
    """The checked out_shardings= text for the pinned shardings: from the real pytrees
    when the program came from a script, else from the result paths where those
    spell the containers (dicts and tuples only). Every sharding is spelled out, as
    lint and suggest spell theirs (``suggest_for``): ``x.sharding`` of an input is
    None on abstract inputs (``jax.eval_shape``'s, a ShapeDtypeStruct given no sharding,
    placed by the jit's in_shardings), where it would pin nothing. (text, None) or (None, why there is none)."""
    intended = [pinned.get(o.index, o.sharding) for o in after.outputs]
    if lowered is None:
        text = out_shardings_text([o.path for o in after.outputs], intended)
        return text, None if text is not None else (
            "the outputs' paths name containers other than dicts and tuples (an attribute key), which only the "
            "script's own pytrees spell: run rewrite on the script")
    pair_of = {rt.output.index: rt.input.index for rt in roundtrips}
    out = suggest_for(lowered, tuple(before.inputs), tuple(before.outputs), intended, pair_of)
    return out.text, out.problem


def rewrite_target(name: str, text: str, request: RewriteRequest, settings: Settings, where: str,
                   declared: dict, devices: list | None = None, lowered=None, inputs=None) -> RewriteReport:
    """The rewrite pipeline (``passes/pipelines/rewrite.py``) over one target, the analyzer's steps its
    callbacks: the program as written compiled, the pins chosen, the program with them compiled."""
    before, program_before, module = analyze_text(name, text, settings, where, devices=devices, runs=True)
    programs = {"after": program_before}

    def compile_pinned(sig: EntrySignature, pins: dict[int, list[list[str]]]) -> TargetReport:
        text_after = with_entry_shardings(module, pins, sig.mesh_name or "mesh")
        after, programs["after"], _ = analyze_text(name, text_after, settings, where, devices=devices, runs=True)
        return after

    done = pipeline.rewrite(module, before, lambda sig, changed: plan(before, sig, changed, request, declared),
                            compile_pinned, display_source)
    applied, after, sig = done.applied, done.after, done.signature
    pinned = {a.index: a.after for a in applied}
    python_fix, python_fix_missing = (_python_fix(lowered, before, after, pinned, done.roundtrips) if applied
                                      else (None, None))
    validation = None
    if request.validate and settings.platform in ACCELERATOR_TARGETS:
        validation = Validation(ran=False, reason=f"compiled for {settings.platform} without one: there is nothing to "
                                "run it on here; validate where the accelerator is (--platform gpu where GPUs are "
                                "present)")
    elif request.validate:
        from .validate import validate

        expected = {a.index: normalized(a.after, len(after.outputs[a.index].shape)) for a in applied}
        host = flat_inputs(inputs, sig, name, where) if inputs is not None else None
        isolation.phase(where, "running both versions on the devices (--validate)")
        validation = validate(program_before, programs["after"], sig, expected, settings, request.repeats,
                              done.figures_before.peak_bytes, done.figures_after.peak_bytes, host, say=request.say)
    return RewriteReport(
        name=name, platform=before.platform, out_shardings=applied, before=done.figures_before,
        after=done.figures_after, collective_changes=done.collective_changes, python_fix=python_fix,
        python_fix_missing=python_fix_missing,
        verdict=done.verdict, remaining=done.remaining, validation=validation,
    )


def rewrite(request: RewriteRequest, settings: Settings) -> RewriteRun:
    reports = []
    if request.path.endswith(".mlir"):
        module, text = read_mlir(request.path)
        needed = entry_signature(module, REWRITE).num_partitions
        check_device_count(request.path, needed)
        settings, devices = resolve_run_target(settings, needed)
        name = os.path.splitext(os.path.basename(request.path))[0]
        reports.append(rewrite_target(name, text, request, settings, request.path, {}, devices))
    else:
        loaded = load_script_targets(request.path, request.targets, request.params, settings)
        fn, where, params, devices, targets = (loaded.entry, loaded.where, loaded.params, loaded.devices,
                                               loaded.targets)
        settings = loaded.settings
        declared_all = _declared(fn, params, where)
        given = script_inputs(fn, params, where) if request.validate else {}
        for name, lowered in targets.items():
            text = jax_adapter.stablehlo_text(lowered)
            reports.append(rewrite_target(name, text, request, settings, where, declared_all.get(name, {}), devices,
                                          lowered, given.get(name, given.get("*"))))
    jax_version, jaxlib_version = jax_adapter.versions()
    run = RewriteRun(tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
                     script=request.path, targets=reports)
    return relativize(run, os.getcwd())
