"""``jax-shard-lint suggest``: choose a sharding for every argument and result of
a target by solving (``passes/solver/problem.py``, ``passes/solver/solve.py``),
then compile the choice beside the program's own shardings and four baselines
(replicated, data-parallel, FSDP, and the best single move of a mesh axis from the
written shardings, ``suggest_moves.py``) and print the checked
``in_shardings=``/``out_shardings=`` text (or, for a target lowered with keyword
arguments, which jit takes no in_shardings for, the text that places the inputs).

Every version is compiled from the same StableHLO with only the entry
function's ``sdy.sharding`` attributes changed (as ``rewrite`` does), so their
peaks, collectives and estimated times compare like for like. The solver
prices arguments and results only for memory; when the compiled peak of its
choice exceeds the budget, the argument budget is lowered by the excess and the
problem solved again (at most ``MAX_ROUNDS`` times).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from ...passes.common.axes import label, sharding_labels
from ...passes.common.byte_sizes import format_bytes
from ...passes.hlo.step_time import significant
from ...passes.models.suggest import (
    ChosenSharding,
    ModelCost,
    PlanCheck,
    SolverStats,
    SuggestReport,
    SuggestRun,
    Version,
)
from ...passes.propagation.call_graph import flatten_call_graph
from ...passes.propagation.sharding_graph import build_graph
from ...passes.propagation.shardy_reference import ShardyRejected, with_sharding_rules
from ...passes.solver.problem import ProblemInput, build_problem
from ...passes.solver.sharding_problem import Assignment, ShardingProblem, breakdown, local_bytes, pin_groups
from ...passes.solver.solve import NoFeasibleSharding, solve
from ...passes.stablehlo.loop_trips import entry_results, value_repeats
from ...passes.stablehlo.module import read_entry_signature
from ...passes.stablehlo.state_roundtrip import correspond
from .. import __version__
from ..adapter import jax_adapter
from ..backend.device_selection import platform_label
from ..backend.out_shardings import suggest_for
from ..backend.script_targets import load_script_targets
from ..backend.sharding_edits import with_entry_shardings
from ..context.config import Settings
from ..context.display_paths import relativize
from ..errors import ShardLintInputError
from ..executors.checked_in_tasks import Spread
from ..platforms.performance import device_spec
from ..supervision import isolation
from .in_shardings import build_text as in_text
from .in_shardings import check_text as check_in_text
from .in_shardings import placement_text as place_text
from .rewrite import _call_entry, parse_spec
from .suggest_logical import declared_logical, rule_advice
from .suggest_moves import NAME as NAME_MOVE
from .suggest_moves import best_move, single_moves
from .suggest_refine import pins as refine_pins
from .suggest_refine import refine
from .suggest_verdict import best_version, verdict
from .suggest_versions import VersionText, compile_versions

FIXED_ENTRY = "shard_lint_fixed"
MAX_ROUNDS = 3
SOLVERS = ("auto", "ilp", "local")


@dataclass(frozen=True)
class SuggestRequest:
    path: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()  # PATH (as written) or PATH=SPEC
    solver: str = "auto"
    time_limit: float = 60.0
    # Where the versions compile: one after another here, or side by side (--jobs, --executor).
    spread: Spread = Spread()


def _matches(path: str, key: str) -> bool:
    return path == key or path.startswith((key + "[", key + "."))


def _fixed(request: SuggestRequest, declared: dict, sig, where: str) -> dict[str, tuple[list[list[str]], str]]:
    """Input path -> (sharding, why), from --fix and shard_lint_fixed()."""
    mesh = dict(sig.mesh.axes)
    wanted: list[tuple[str, str | None, str]] = []
    for item in request.fixes:
        key, sep, spec = item.partition("=")
        wanted.append((key.strip(), spec if sep else None, f"--fix {item}"))
    for key, spec in declared.items():
        wanted.append((str(key), None if spec is None else str(spec), f"{FIXED_ENTRY}()"))
    out: dict[str, tuple[list[list[str]], str]] = {}
    for key, spec, why in wanted:
        hits = [t for t in sig.inputs if _matches(t.path, key)]
        if not hits:
            raise ShardLintInputError(where if why.startswith(FIXED_ENTRY) else "--fix",
                                      f"no argument {key!r} (arguments: {', '.join(t.path for t in sig.inputs)})")
        for t in hits:
            if spec is None:
                sharding = t.sharding or [[] for _ in t.shape]
            else:
                sharding = parse_spec(spec, mesh, len(t.shape), "--fix" if why.startswith("--fix") else where)
                for n, axes in zip(t.shape, sharding):
                    size = 1
                    for a in axes:
                        size *= mesh[a]
                    if n % size:
                        raise ShardLintInputError("--fix", f"{t.path}: {spec} does not divide its shape {t.shape}")
            out[t.path] = (sharding, why)
    return out


def _declared_fixed(fn, params: dict, name: str, where: str) -> dict:
    defined, result = _call_entry(fn, FIXED_ENTRY, params, where)
    if not defined or result is None:
        return {}
    if isinstance(result, (list, tuple)):
        return dict.fromkeys(result)
    if isinstance(result, dict) and all(isinstance(v, dict) for v in result.values()) and result:
        return dict(result.get(name, {}))
    if isinstance(result, dict):
        return dict(result)
    raise ShardLintInputError(where, f"{FIXED_ENTRY}() returned {type(result).__name__}; expected a list of "
                              "argument paths or a dict of argument path to PartitionSpec (None: as written)")


@dataclass
class _Target:
    name: str
    lowered: Any
    text: str
    module: Any
    sig: Any
    problem: ShardingProblem
    fixed: dict[str, tuple[list[list[str]], str]]  # argument path -> (sharding, why)
    state: tuple  # RoundTrips: the outputs that are inputs coming back
    graph: Any  # the ShardingGraph the problem was built from (tensor ids for suggest_refine)
    ownership: Any


def _problem(name: str, lowered, request: SuggestRequest, settings: Settings, declared: dict, where: str) -> _Target:
    return problem_of_text(name, jax_adapter.stablehlo_text(lowered), request, settings, declared, where, lowered)


def problem_of_text(name: str, text: str, request: SuggestRequest, settings: Settings, declared: dict, where: str,
                    lowered: Any = None) -> _Target:
    """The target's sharding problem from its StableHLO text (``lowered``: the jitted program it came from,
    for suggest's Python text; None where only the text is known: check's snapshot, lint's fix checks)."""
    module = jax_adapter.parse_stablehlo(text)
    sig = read_entry_signature(module)
    sizes = dict(sig.mesh.axes)
    if sig.mesh.size <= 1 or not sig.mesh_name:
        raise ShardLintInputError(where, f"target {name!r} has no mesh of several devices to shard over (give its "
                                  "inputs NamedShardings on a jax.make_mesh mesh)")
    free = tuple(request.axes) or tuple(a for a, n in sig.mesh.axes if n > 1)
    for a in free:
        if a not in sizes:
            raise ShardLintInputError("--axes", f"no mesh axis {a!r} (mesh: {', '.join(sizes)})")
    isolation.phase(where, f"building the sharding problem of target {name!r}")
    try:
        # Each call site its own choices (Shardy flattens the call graph the same way).
        ruled = with_sharding_rules(flatten_call_graph(module))
    except ShardyRejected as e:
        raise ShardLintInputError(where, f"target {name!r}: Shardy rejects the module: {e}") from e
    g = build_graph(ruled, settings.ownership())
    labels = dict(sizes)
    args = [t for t, f in g.function_args if f == g.entry]
    results = entry_results(ruled, g.value_ids)
    if None in results:
        raise ShardLintInputError(where, f"target {name!r}: result {results.index(None)} is not a tensor value")
    fixed = _fixed(request, declared, sig, where)
    pinned, open_dims = {}, {}
    for t in g.tensors:
        if t.seed and not t.seed.startswith(("argument", "out_shardings of result")):
            for ref in (r for axes in t.dims for r in axes):
                labels.setdefault(label(ref, sizes), ref[2])  # a sub-axis ("x:(1)2") has its own size
            pinned[t.id] = (sharding_labels(t.dims, sizes), f"stated in the program ({t.seed})")
            open_dims[t.id] = tuple(d for d, closed in enumerate(t.closed) if not closed)
    for i, tid in enumerate(args):
        if sig.inputs[i].path in fixed:
            sharding, why = fixed[sig.inputs[i].path]
            pinned[tid] = (tuple(tuple(a) for a in sharding), why)
    pairs = correspond(sig)
    donated_out = {rt.output.index for rt in pairs if rt.input.donated}
    spec = settings.device_spec() or device_spec("cpu")
    problem = build_problem(g, ProblemInput(
        free_axes=free, axis_sizes=labels, spec=spec, repeats=value_repeats(ruled, g.value_ids), arguments=tuple(args),
        results=tuple(results),
        argument_paths=tuple(t.path for t in sig.inputs), result_paths=tuple(o.path for o in sig.outputs),
        pinned=pinned, ties=tuple((rt.input.index, rt.output.index) for rt in pairs),
        result_donated=tuple(o.index in donated_out for o in sig.outputs), budget_bytes=settings.budget_bytes,
        open_dims=open_dims,
    ))
    return _Target(name, lowered, text, module, sig, problem, fixed, pairs, g, settings.ownership())


def _compile_all(t: _Target, wanted: list[tuple[str, str, dict[int, list[list[str]]] | None,
                                              dict[int, list[list[str]]]]],
                 settings: Settings, devices, where: str, spread: Spread) -> list[tuple[Version, Any]]:
    """Each (name, description, argument pins or None for the written program, result pins)
    version of the target compiled and measured: one after another here, or side by side."""
    texts = [VersionText(name, description,
                         t.text if args is None else with_entry_shardings(t.module, results, t.sig.mesh_name, args))
             for name, description, args, results in wanted]
    return compile_versions(t.name, t.sig.num_partitions, texts, settings, devices, where, spread)


def _model_cost(problem: ShardingProblem, a: Assignment) -> ModelCost:
    compute, reduction, reshard = breakdown(problem, a)
    return ModelCost(seconds=significant(compute + reduction + reshard), compute_seconds=significant(compute),
                     reduction_seconds=significant(reduction), reshard_seconds=significant(reshard))


def _with_model(version: Version, pins: dict[int, list[list[str]]], problem: ShardingProblem,
                request: SuggestRequest) -> Version:
    """The version with the solver's cost model of its argument shardings (its best intermediates)."""
    pinned = pin_groups(problem, {problem.arguments[i]: tuple(tuple(a) for a in s) for i, s in pins.items()})
    if pinned is None or version.error:
        return version
    try:
        model = solve(pinned, request.solver, request.time_limit)
    except NoFeasibleSharding:
        return version
    return version.model_copy(update={"model": _model_cost(pinned, model.assignment)})


def _baselines(t: _Target) -> list[tuple[str, str, dict[int, list[list[str]]]]]:
    """Replicated, data-parallel and FSDP argument shardings over the free axes:
    state (an argument that comes back as a result) is replicated, or sharded on its
    largest dimension the axes divide; other arguments on their leading dimension."""
    sizes, free = t.problem.axis_sizes, t.problem.free_axes
    total = 1
    for a in free:
        total *= sizes[a]
    state = {rt.input.index for rt in t.state}

    def on(shape, dim) -> list[list[str]]:
        return [list(free) if d == dim else [] for d in range(len(shape))]

    def data(x) -> list[list[str]]:
        return on(x.shape, 0) if x.shape and x.shape[0] % total == 0 else [[] for _ in x.shape]

    def fsdp(x) -> list[list[str]]:
        dims = sorted((d for d, n in enumerate(x.shape) if n % total == 0), key=lambda d: (-x.shape[d], d))
        return on(x.shape, dims[0]) if dims else [[] for _ in x.shape]

    out = [("replicated", "every argument replicated", {x.index: [[] for _ in x.shape] for x in t.sig.inputs})]
    out.append(("data-parallel", f"state replicated, other arguments split on dimension 0 over {', '.join(free)}",
                {x.index: ([[] for _ in x.shape] if x.index in state else data(x)) for x in t.sig.inputs}))
    out.append(("fsdp", f"state split on its largest dimension over {', '.join(free)}, other arguments on "
                "dimension 0", {x.index: (fsdp(x) if x.index in state else data(x)) for x in t.sig.inputs}))
    return out


def _texts(t: _Target, args: list[ChosenSharding], results: list[ChosenSharding]):
    """(in_shardings text, out_shardings text, why none) for the chosen shardings, each checked."""
    intended_in = [c.suggested for c in args]
    try:
        text_in = in_text(t.lowered, t.sig.inputs, intended_in)
    except (ValueError, TypeError, AttributeError) as e:
        return None, None, f"no in_shardings text could be built: {e}"
    problem = check_in_text(text_in, t.lowered, t.sig.inputs, intended_in)
    if problem is not None:
        return None, None, f"the in_shardings text did not check ({problem}); not shown"
    # out_shardings may name an input subtree coming back: its sharding is then the suggested input one.
    arriving = tuple(x.model_copy(update={"sharding": c.suggested}) for x, c in zip(t.sig.inputs, args))
    pair_of = {rt.output.index: rt.input.index for rt in t.state}
    out = suggest_for(t.lowered, arriving, t.sig.outputs, [c.suggested for c in results], pair_of)
    if out.text is None:
        return text_in, None, out.problem
    return text_in, out.text, None


def _explicit_axes(lowered: Any) -> bool:
    """Whether the program's mesh has Explicit axes (sharding in types: jax.make_mesh's default)."""
    import jax

    mesh = jax_adapter.lowered_mesh(lowered)
    return mesh is not None and any(a == jax.sharding.AxisType.Explicit for a in getattr(mesh, "axis_types", ()))


def _chosen_list(infos, pins: dict[int, list[list[str]]], problem: ShardingProblem, why: dict) -> list[ChosenSharding]:
    out = []
    for x in infos:
        sharding = pins.get(x.index) or [[] for _ in x.shape]
        out.append(ChosenSharding(
            index=x.index, path=x.path, shape=list(x.shape), dtype=x.dtype, current=x.sharding,
            suggested=sharding, current_per_device_bytes=x.per_device_bytes,
            suggested_per_device_bytes=local_bytes(tuple(x.shape), x.dtype, tuple(tuple(a) for a in sharding),
                                                   problem.axis_sizes),
            pinned=why.get(x.path),
        ))
    return out


@dataclass(frozen=True)
class _Compiled:
    plan: Any  # suggest_refine.Plan
    version: Version
    report: Any
    arg_pins: dict[int, list[list[str]]]
    res_pins: dict[int, list[list[str]]]


def _plan_check(t: _Target, c: _Compiled) -> PlanCheck:
    check, v = c.plan.check, c.version
    return PlanCheck(
        solve=c.plan.solve, objective_seconds=significant(c.plan.solution.seconds),
        propagated_seconds=None if check is None else significant(check.seconds),
        differing_values=None if check is None else len(check.differing),
        excluded=[f"{t.sig.inputs[i].path}: no {axis!r} on dimension {dim}" for i, dim, axis in c.plan.excluded],
        estimated_seconds=v.estimated_seconds, peak_bytes=v.peak_bytes, error=v.error,
    )


def _solve_within_budget(t: _Target, request: SuggestRequest, settings: Settings, devices, where: str):
    """The solver's plans (each checked against propagation, ``suggest_refine``), each
    compiled; the fastest that fits is the solver's version. When none fits, the
    arguments' budget is lowered by the smallest excess and the loop run again."""
    budget = settings.budget_bytes
    spec = settings.device_spec() or device_spec("cpu")
    arg_budget, rounds = budget, 0
    say = request.spread.say or (lambda _msg: None)
    while True:
        rounds += 1
        isolation.phase(where, f"solving the sharding problem of target {t.name!r} ({t.problem.size:,} variables)")
        say(f"{t.name}: solving the sharding problem ({t.problem.size:,} variables, at most "
            f"{request.time_limit:g} s per solve)")
        try:
            refined = refine(t, dataclasses.replace(t.problem, budget_bytes=arg_budget), request.solver,
                             request.time_limit, spec)
        except NoFeasibleSharding as e:
            raise ShardLintInputError(where, f"target {t.name!r}: {e} ({format_bytes(arg_budget or 0)} for "
                                      "arguments and results)") from e
        pins = [(refine_pins(p.problem, p.solution.assignment, p.problem.arguments),
                 refine_pins(p.problem, p.solution.assignment, p.problem.results)) for p in refined.plans]
        say(f"{t.name}: compiling the solver's {len(pins)} plan(s)")
        measured = _compile_all(t, [("solver", "the solver's choice", a, r) for a, r in pins], settings, devices,
                                where, request.spread)
        compiled = [_Compiled(plan, version.model_copy(update={"model": _model_cost(plan.problem,
                                                                                    plan.solution.assignment)}),
                              report, a, r)
                    for plan, (version, report), (a, r) in zip(refined.plans, measured, pins)]
        checks = [_plan_check(t, c) for c in compiled]  # in solve order, as the plans are
        ok = [c for c in compiled if not c.version.error and c.version.estimated_seconds is not None]
        fitting = [c for c in ok if c.version.fits is not False]
        if fitting or not ok or rounds >= MAX_ROUNDS:
            kept = min(fitting or ok or compiled, key=lambda c: (
                c.version.estimated_seconds or 0.0, c.version.peak_bytes or 0, c.plan.solve))
            return refined, kept, checks, rounds
        least = min(ok, key=lambda c: c.version.peak_bytes or 0)
        over = (least.version.peak_bytes or 0) - budget
        if least.plan.solution.memory_bytes - over <= 0:
            return refined, least, checks, rounds
        arg_budget = least.plan.solution.memory_bytes - over


def suggest_target(name: str, lowered, request: SuggestRequest, settings: Settings, declared: dict,
                   devices, where: str, logical: tuple | None = None) -> SuggestReport:
    t = _problem(name, lowered, request, settings, declared, where)
    problem, budget = t.problem, settings.budget_bytes
    fixed = t.fixed
    why = {path: w for path, (_, w) in fixed.items()}
    refined, kept, checks, rounds = _solve_within_budget(t, request, settings, devices, where)
    solution, solver_version, solver_report = kept.plan.solution, kept.version, kept.report
    arg_pins, res_pins = kept.arg_pins, kept.res_pins
    versions = [solver_version]
    pins_of = {"solver": (arg_pins, res_pins)}
    reports = {"solver": solver_report}
    state = {rt.output.index: rt.input.index for rt in t.state}
    written = {x.index: x.sharding for x in t.sig.inputs if x.sharding is not None}
    wanted = []
    for vname, description, pins in [("written", "the shardings the program states", None)] + _baselines(t):
        if pins is not None:
            pins = {**pins, **{x.index: fixed[x.path][0] for x in t.sig.inputs if x.path in fixed}}
        wanted.append((vname, description, pins, {o: pins[i] for o, i in state.items()} if pins is not None else {}))
    say = request.spread.say or (lambda _msg: None)
    say(f"{name}: compiling {', '.join(v[0] for v in wanted)} to compare")
    measured = _compile_all(t, wanted, settings, devices, where, request.spread)
    for (vname, _, pins, outs), (version, report) in zip(wanted, measured):
        versions.append(_with_model(version, pins if pins is not None else written, problem, request))
        pins_of[vname], reports[vname] = (pins, outs), report
    as_fixed = {**written, **{x.index: fixed[x.path][0] for x in t.sig.inputs if x.path in fixed}}
    moves = single_moves(t.sig.inputs, as_fixed, problem.free_axes, problem.axis_sizes, set(fixed))
    if moves:
        say(f"{name}: compiling {len(moves)} single moves of a mesh axis from the written shardings")
        wanted_moves = [(NAME_MOVE, m.description, m.pins, {o: m.pins[i] for o, i in state.items()}) for m in moves]
        moved = best_move(moves, _compile_all(t, wanted_moves, settings, devices, where, request.spread))
        if moved is not None:
            move, version, report = moved
            versions.append(_with_model(version, move.pins, problem, request))
            pins_of[NAME_MOVE], reports[NAME_MOVE] = (move.pins, {o: move.pins[i] for o, i in state.items()}), report
    best = best_version(versions)
    notes = []
    if best is None:
        tried = "; ".join(f"{v.name}: {v.error or format_bytes(v.peak_bytes or 0)}" for v in versions)
        raise ShardLintInputError(where, f"target {name!r}: no version compiled within the budget ({tried})")
    arg_pins = pins_of[best.name][0] or written  # keeping the written shardings: they are the pins
    # Results: the layouts the chosen version compiled to, pinned so the next step gets them.
    compiled_outs = {o.index: o.sharding for o in reports[best.name].outputs if o.sharding is not None}
    args = _chosen_list(t.sig.inputs, arg_pins, problem, why)
    results = _chosen_list(t.sig.outputs, {**compiled_outs, **(pins_of[best.name][1] or {})}, problem, {})
    text_in, text_out, text_problem = _texts(t, args, results)
    # jit takes no in_shardings with keyword arguments (JAX: "pjit does not support kwargs when in_shardings is
    # specified"): the inputs are placed instead, and jit compiles for the shardings they arrive with.
    keywords = jax_adapter.has_keyword_arguments(t.lowered)
    placement = place_text(t.lowered, t.sig.inputs, text_in) if text_in and (
        keywords or _explicit_axes(t.lowered)) else None
    if keywords and placement is not None:
        text_in = None
    advice = rule_advice(args, *logical) if logical is not None else None
    if solution.method == "local search":
        notes.append(f"{problem.size:,} variables: above the ILP's limit, a local search chose (no bound)")
    if rounds > 1:
        notes.append(f"none of the solver's plans compiled within the budget; its arguments' budget was lowered "
                     f"and the problem solved {rounds} times")
    if placement is None:  # the placement text already places every input
        notes.append("place the state you pass in on these shardings (jax.device_put(x, sharding)) so the first "
                     "step does not reshard it")
    return SuggestReport(
        name=name, platform=platform_label(settings), device=(settings.device_spec() or device_spec("cpu")).name,
        mesh=list(t.sig.mesh.axes), free_axes=list(problem.free_axes), budget_bytes=budget, chosen=best.name,
        arguments=args, results=results,
        solver=SolverStats(
            method=solution.method, variables=solution.variables, value_groups=len(problem.groups),
            ops=len(problem.ops), solve_seconds=round(refined.solve_seconds, 3),
            objective_seconds=significant(solution.seconds),
            lower_bound_seconds=None if solution.lower_bound is None else significant(solution.lower_bound),
            gap=None if solution.gap is None else round(solution.gap, 6), rounds=rounds, plans=checks,
            untied_variables=solution.untied_variables,
            lp_bound_seconds=None if solution.lp_bound is None else significant(solution.lp_bound),
            certified_gap=None if solution.certified_gap is None else round(solution.certified_gap, 6),
            kept=kept.plan.solve,
        ),
        versions=versions, in_shardings_text=text_in, out_shardings_text=text_out, placement_text=placement,
        logical_rules=advice, text_problem=text_problem,
        verdict=verdict(versions, best, budget), notes=notes,
    )


def suggest(request: SuggestRequest, settings: Settings) -> SuggestRun:
    if request.solver not in SOLVERS:
        raise ShardLintInputError("--solver", f"expected one of {', '.join(SOLVERS)}, got {request.solver!r}")
    loaded = load_script_targets(request.path, request.targets, request.params, settings)
    fn, where, params, devices, targets = loaded.entry, loaded.where, loaded.params, loaded.devices, loaded.targets
    settings = loaded.settings
    reports = []
    logical = declared_logical(fn, params, where)
    for name, lowered in targets.items():
        declared = _declared_fixed(fn, params, name, where)
        reports.append(suggest_target(name, lowered, request, settings, declared, devices, where, logical))
    jax_version, jaxlib_version = jax_adapter.versions()
    run = SuggestRun(tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
                     script=request.path, targets=reports)
    return relativize(run, os.getcwd())

