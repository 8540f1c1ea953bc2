"""``jax-shard-lint suggest``: choose a sharding for every argument and result of
a target by solving (the suggest pipeline, ``passes/pipelines/suggest.py``: the
problem built in ``target.py``, solved and refined in a loop),
then compile the choice beside the program's own shardings and four baselines
(replicated, data-parallel, FSDP, and the best single move of a mesh axis from the
written shardings, ``moves.py``) and print the checked
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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ....passes.common.byte_sizes import format_bytes
from ....passes.models.errors import NoFeasibleSharding
from ....passes.models.suggest import ChosenSharding, SuggestReport, SuggestRun, Version
from ....passes.pipelines import suggest as pipeline
from ....passes.pipelines.entry import changed_roundtrips, state_roundtrips
from ....passes.pipelines.fix_checks import FIX_CHECKS
from ....passes.pipelines.suggest import Pins, Refined, ShardingProblem, time_resolution
from ....passes.pipelines.suggest_budget import WithinBudget, within_budget
from ... import __version__
from ...adapter import jax_adapter
from ...backend.advice.baselines import baseline_layouts
from ...backend.advice.moves import NAME as NAME_MOVE
from ...backend.advice.moves import Move, batch_move, best_move, single_moves
from ...backend.advice.problem import SuggestTarget, refine
from ...backend.advice.solve_memo import solve_memo
from ...backend.advice.verdict import VersionText, advised_version, verdict, with_rematerializations
from ...backend.device_selection import platform_label
from ...backend.fix_verdicts import cost_text, measured_check, rematerializations, traffic_bytes
from ...backend.out_shardings import suggest_for
from ...backend.parameter_moves import mirrors, state_returns
from ...backend.script_targets import load_script_targets
from ...backend.sharding_edits import with_entry_shardings
from ...context.config import Settings
from ...context.display_paths import relativize
from ...errors import ShardLintInputError
from ...executors.checked_in_tasks import Spread
from ...supervision import isolation
from .fixed import declared_fixed
from .in_shardings import abstract_inputs_text, check_abstract_inputs, jit_options_text
from .in_shardings import build_text as in_text
from .in_shardings import check_text as check_in_text
from .in_shardings import placement_text as place_text
from .logical import declared_logical, rule_advice
from .target import SuggestRequest, target_problem
from .versions import SideBySide, SolveHeartbeat, compile_versions

MAX_ROUNDS = 3
SOLVERS = ("auto", "ilp", "local")


def _compile_all(t: SuggestTarget, wanted: list[tuple[str, str, dict[int, list[list[str]]] | None,
                                              dict[int, list[list[str]]]]],
                 settings: Settings, devices, where: str, spread: Spread) -> list[tuple[Version, Any]]:
    """Each (name, description, argument pins or None for the written program, result pins)
    version of the target compiled and measured: side by side in this process (one after another on one
    core), or by the executor."""
    texts = _version_texts(t, wanted)
    if t.side_by_side is not None:  # in this process, on several cores: each text compiled once, side by side
        measured = t.side_by_side.measured(texts)
    else:
        # A program this target already compiled (a single move that is a baseline) is not compiled again.
        todo = [v for v in texts if v.text not in t.compiled]
        for v, m in zip(todo, compile_versions(t.name, t.sig.num_partitions, todo, settings, devices, where,
                                               spread)):
            t.compiled.setdefault(v.text, m)
        measured = [(t.compiled[v.text][0].model_copy(update={"name": v.name, "description": v.description}),
                     t.compiled[v.text][1]) for v in texts]
    # The traffic lint's fix checks measure: the collectives, and the state the next step reshards on entry.
    return [(v if r is None else v.model_copy(update={"traffic_bytes": traffic_bytes(r, t.sig)}), r)
            for v, r in measured]


def _version_texts(t: SuggestTarget, wanted: list) -> list[VersionText]:
    """Each (name, description, argument pins or None for the written program, result pins) as its text."""
    return [VersionText(name, description,
                        t.text if args is None else with_entry_shardings(t.module, results, t.sig.mesh_name, args))
            for name, description, args, results in wanted]


def _as_lint_checks(t: SuggestTarget, version: Version, moved: Any, written: Version, as_written: Any,
                    remats: frozenset[str], move: Move, compile_lint: Any) -> Version:
    """The single move described with lint's fix check of the same change against the written program
    (``fix_verdicts.measured_check`` of lint's candidate: one program, one measure, the same figures in both;
    ``remats``: the written program's rematerializations). lint's check leaves to XLA the state outputs the
    written step returns on another layout than it takes them and the move does not move (SL201's,
    ``parameter_moves.state_returns``), where this version pins every state output: that program is compiled
    (``compile_lint``: its (argument pins, result pins) -> its report) and the text says what differs. What moves
    with the argument is said only where there is some: an input batch has no optimizer state and does not come
    back."""
    if as_written is None or written.peak_bytes is None or written.traffic_bytes is None:
        return version
    pairs = {rt.output.index: rt.input.index for rt in t.state}
    unsettled = state_returns(pairs, as_written.inputs, as_written.outputs).unsettled
    left = [o for o in move.results if o in unsettled and pairs.get(o) not in move.moved]
    if left:
        moved = compile_lint(move.moved, {o: s for o, s in move.results.items() if o not in left})
        if moved is None:
            return version
    check = measured_check(version.description, moved,
                           (written.peak_bytes, written.traffic_bytes, written.collective_bytes), t.sig, remats)
    changed = move.moved
    mirrored = any(j in changed for i in changed for j in mirrors(t.sig.inputs, i))
    returned = any(rt.input.index in changed for rt in t.state)
    with_it = (", its optimizer state with it" if mirrored else "") + (
        (" and" if mirrored else ",") + " returned in that layout" if returned else "")
    differs = (f", with the {len(left)} state output{'s' if len(left) > 1 else ''} the step as written returns on "
               "another layout than it takes left to XLA, which this version pins" if left else "")
    return version.model_copy(update={"description": f"{version.description}{with_it} (as lint checks it{differs}: "
                                      f"{cost_text(check)})"})


def _returning_state(t: SuggestTarget, args: Pins, results: Pins) -> Pins:
    """``results`` with every state output pinned to its argument's sharding in ``args``: the round trip lint
    checks (SL201). A version suggest compiles and may print returns the state as it takes it, so pasted with
    its in_shardings the next step accepts what this one returned (else jit raises "Sharding passed to jit does
    not match"), and its figures are that program's."""
    return {**results, **{rt.output.index: args[rt.input.index] for rt in t.state if rt.input.index in args}}


def _returns_state_as_taken(t: SuggestTarget, report: Any) -> bool:
    """Whether the compiled program ``report`` returns every state output on its input's sharding (lint's
    round-trip rule, ``state_roundtrips``/``changed_roundtrips``, on the compiled shardings)."""
    if report is None:
        return False
    compiled = dataclasses.replace(t.sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    return not changed_roundtrips(state_roundtrips(compiled, FIX_CHECKS), FIX_CHECKS)


def _with_model(version: Version, pins: dict[int, list[list[str]]], problem: ShardingProblem,
                request: SuggestRequest, settings: Settings) -> Version:
    """The version with the solver's cost model of its argument shardings (its best intermediates)."""
    if version.error:
        return version
    model = pipeline.pinned_model_cost(problem, pins, request.solver, request.time_limit, solve_memo(settings))
    return version if model is None else version.model_copy(update={"model": model})


def _baselines(t: SuggestTarget) -> list[tuple[str, str, dict[int, list[list[str]]]]]:
    """Replicated, data-parallel and FSDP argument shardings over the free axes (``advice.baselines``)."""
    return baseline_layouts(t.sig.inputs, {rt.input.index for rt in t.state}, t.problem.free_axes,
                            t.problem.axis_sizes)


def _texts(t: SuggestTarget, args: list[ChosenSharding], results: list[ChosenSharding]):
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
    # Spelled out, not x.sharding of the inputs: the text holds however the inputs arrive (abstract ones too).
    out = suggest_for(t.lowered, arriving, t.sig.outputs, [c.suggested for c in results], pair_of)
    if out.text is None:
        return text_in, None, out.problem
    return text_in, out.text, None


def _explicit_axes(lowered: Any) -> bool:
    """Whether the program's mesh has Explicit axes (sharding in types: jax.make_mesh's default)."""
    import jax

    mesh = jax_adapter.lowered_mesh(lowered)
    return mesh is not None and any(a == jax.sharding.AxisType.Explicit for a in getattr(mesh, "axis_types", ()))


def _solve_within_budget(t: SuggestTarget, request: SuggestRequest, settings: Settings, devices, where: str
                         ) -> WithinBudget:
    """The suggest pipeline's budget loop (``passes/pipelines/suggest_budget.py``) around this target's
    solves (each plan checked against propagation) and the compiles of their plans."""
    spec = settings.solver_device_spec
    say = request.spread.say or (lambda _msg: None)

    def solve_under(arg_budget: int | None) -> Refined:
        isolation.phase(where, f"solving the sharding problem of target {t.name!r} ({t.problem.size:,} variables)")
        say(f"{t.name}: solving the sharding problem ({t.problem.size:,} variables)")
        try:
            with SolveHeartbeat(request.spread.say, t.name, t.side_by_side):
                refined = refine(t, dataclasses.replace(t.problem, budget_bytes=arg_budget), request.solver,
                                 request.time_limit, spec,
                                 solve_memo(settings, t.text, t.ownership, spec))
        except NoFeasibleSharding as e:
            raise ShardLintInputError(where, f"target {t.name!r}: {e} ({format_bytes(arg_budget or 0)} for "
                                      "arguments and results)") from e
        if t.side_by_side is not None and t.side_by_side.progress is not None:
            t.side_by_side.progress.release()  # the solve has a plan: the compiles beside it are shown
        # The solve's wall time goes to stderr, not the report: the JSON is byte-identical run to run.
        say(f"{t.name}: solved in {refined.solve_seconds:.2f} s ({len(refined.plans)} plan(s))")
        return refined

    def compile_plans(pins: list[tuple[Pins, Pins]]) -> list[tuple[Version, Any]]:
        say(f"{t.name}: compiling the solver's {len(pins)} plan(s)")
        return _compile_all(t, [("solver", "the solver's choice", a, _returning_state(t, a, r)) for a, r in pins],
                            settings, devices, where, request.spread)

    return within_budget(settings.budget_bytes, [x.path for x in t.sig.inputs], solve_under, compile_plans,
                         MAX_ROUNDS)


def suggest_target(name: str, lowered, request: SuggestRequest, settings: Settings, declared: dict,
                   devices, where: str, logical: tuple | None = None) -> SuggestReport:
    t = target_problem(name, lowered, request, settings, declared, where)
    workers = os.cpu_count() or 1
    if not request.spread.executor.in_process or workers < 2:
        return _suggest_target(t, request, settings, devices, where, logical)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="suggest-version") as pool:
        t.side_by_side = SideBySide(pool, name, t.sig.num_partitions, settings, devices, where, request.spread.say)
        try:
            return _suggest_target(t, request, settings, devices, where, logical)
        except BaseException:
            if t.side_by_side.progress is not None:
                t.side_by_side.progress.drop()  # the error is the line to read, not the compiles given up
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # a solve that raised: what was started is not wanted


def _suggest_target(t: SuggestTarget, request: SuggestRequest, settings: Settings, devices, where: str,
                    logical: tuple | None) -> SuggestReport:
    name = t.name
    problem, budget = t.problem, settings.budget_bytes
    fixed = t.fixed
    why = {path: w for path, (_, w) in fixed.items()}
    resolution = time_resolution(settings.solver_device_spec, t.sig)
    state = {rt.output.index: rt.input.index for rt in t.state}
    written = {x.index: x.sharding for x in t.sig.inputs if x.sharding is not None}
    wanted = []
    for vname, description, pins in [("written", "the shardings the program states", None)] + _baselines(t):
        if pins is not None:
            pins = {**pins, **{x.index: fixed[x.path][0] for x in t.sig.inputs if x.path in fixed}}
        wanted.append((vname, description, pins, {o: pins[i] for o, i in state.items()} if pins is not None else {}))
    as_fixed = {**written, **{x.index: fixed[x.path][0] for x in t.sig.inputs if x.path in fixed}}
    moves = single_moves(t.sig.inputs, as_fixed, problem.free_axes, problem.axis_sizes, set(fixed), state)
    # lint's idle-batch fix (the batch on every axis, SL105's and SL207's) is one of the moves suggest ranks, so
    # the single move suggest keeps is never worse than the fix lint checks for the same values.
    batch = batch_move(t.sig.inputs, as_fixed, problem.free_axes, problem.axis_sizes, set(fixed), state)
    if batch is not None and all(m.pins != batch.pins for m in moves):
        moves = [batch, *moves]
    # A move pins what it changes, and every state argument (as written: the same program) so that each
    # comes back on its own sharding.
    state_args = {rt.input.index for rt in t.state}
    wanted_moves = [(NAME_MOVE, m.description, {**{i: m.pins[i] for i in state_args if i in m.pins}, **m.moved},
                     _returning_state(t, m.pins, m.results)) for m in moves]
    if t.side_by_side is not None:
        # The written program, the baselines and the single moves do not depend on the solve: they compile
        # while it runs.
        t.side_by_side.start(_version_texts(t, wanted + wanted_moves), "to compare while the solver runs")
    solved = _solve_within_budget(t, request, settings, devices, where)
    refined, kept, rounds = solved.refined, solved.kept, solved.rounds
    solution, solver_version, solver_report = kept.plan.solution, kept.version, kept.report
    arg_pins, res_pins = kept.arg_pins, kept.res_pins
    versions = [solver_version]
    pins_of = {"solver": (arg_pins, _returning_state(t, arg_pins, res_pins))}
    reports = {"solver": solver_report}
    say = request.spread.say or (lambda _msg: None)
    if t.side_by_side is None:  # else they were started beside the solve, and said so
        say(f"{name}: compiling {', '.join(v[0] for v in wanted)} to compare")
    measured = _compile_all(t, wanted, settings, devices, where, request.spread)
    for (vname, _, pins, outs), (version, report) in zip(wanted, measured):
        versions.append(_with_model(version, pins if pins is not None else written, problem, request, settings))
        pins_of[vname], reports[vname] = (pins, outs), report
    # What XLA rematerializes to compile a version and not the program as written ranks it below the rest
    # (advised_version: lint's fix checks' rule).
    remats = rematerializations(reports["written"]) if reports.get("written") is not None else frozenset()
    versions = [with_rematerializations(v, reports[v.name], remats) for v in versions]
    if moves:
        if t.side_by_side is None:
            say(f"{name}: compiling {len(moves)} single moves of a mesh axis from the written shardings")
        moved = best_move(moves, _compile_all(t, wanted_moves, settings, devices, where, request.spread),
                          resolution, remats, next((v for v in versions if v.name == "written"), None))
        if moved is not None:
            move, version, report = moved
            def compile_lint(args: Pins, results: Pins) -> Any:
                return _compile_all(t, [(NAME_MOVE, "as lint checks it", args, results)], settings, devices, where,
                                    request.spread)[0][1]

            version = _as_lint_checks(t, version, report, next(v for v in versions if v.name == "written"),
                                      reports["written"], remats, move, compile_lint)
            versions.append(_with_model(version, move.pins, problem, request, settings))
            pins_of[NAME_MOVE] = (move.pins, _returning_state(t, move.pins, move.results))
            reports[NAME_MOVE] = report
    # The program as written, where it returns some state on another sharding than it takes it, is no layout to
    # paste with in_shardings: step 2 would be refused. Every other version pins its state's round trips.
    written_round_trips = _returns_state_as_taken(t, reports.get("written"))
    best = advised_version([v for v in versions if v.name != "written" or written_round_trips], resolution,
                           next((v for v in versions if v.name == "written"), None))
    notes = []
    if best is None:
        tried = "; ".join(f"{v.name}: {v.error or format_bytes(v.peak_bytes or 0)}" for v in versions)
        # Where the written version alone would have been chosen, the budget is not why nothing is.
        kept_out = not written_round_trips and advised_version(
            [v for v in versions if v.name == "written"], resolution) is not None
        left_out = ("; the program as written fits but returns state on another sharding than it takes it "
                    "(lint's SL201 says which), so it is no layout to paste" if kept_out else "")
        raise ShardLintInputError(where, f"target {name!r}: no version compiled within the budget ({tried}){left_out}")
    arg_pins = pins_of[best.name][0] or written  # keeping the written shardings: they are the pins
    # Results: the layouts the chosen version compiled to, pinned so the next step gets them.
    compiled_outs = {o.index: o.sharding for o in reports[best.name].outputs if o.sharding is not None}
    args = pipeline.chosen_shardings(t.sig.inputs, arg_pins, problem, why)
    results = pipeline.chosen_shardings(
        t.sig.outputs, _returning_state(t, arg_pins, {**compiled_outs, **(pins_of[best.name][1] or {})}), problem, {})
    text_in, text_out, text_problem = _texts(t, args, results)
    # jit takes no in_shardings with keyword arguments (JAX: "pjit does not support kwargs when in_shardings is
    # specified"): the inputs are placed instead, and jit compiles for the shardings they arrive with.
    keywords = jax_adapter.has_keyword_arguments(t.lowered)
    placement = place_text(t.lowered, t.sig.inputs, text_in) if text_in and (
        keywords or _explicit_axes(t.lowered)) else None
    if keywords and placement is not None:
        text_in = None
    # Abstract inputs that carry a sharding (the README's convention) must carry the new one too.
    rewrap = abstract_inputs_text(t.lowered) if text_in and placement is None else None
    if rewrap is not None and check_abstract_inputs(rewrap, text_in, t.lowered, t.sig.inputs,
                                                    [c.suggested for c in args]) is not None:
        rewrap = None
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
        name=name, platform=platform_label(settings), device=settings.solver_device_spec.name,
        mesh=list(t.sig.mesh.axes), free_axes=list(problem.free_axes), budget_bytes=budget, chosen=best.name,
        arguments=args, results=results,
        solver=pipeline.solver_stats(problem, refined, kept.plan, rounds, solved.checks),
        versions=versions, in_shardings_text=text_in, out_shardings_text=text_out, placement_text=placement,
        abstract_inputs_text=rewrap, jit_options_text=jit_options_text(t.lowered, t.sig.inputs),
        logical_rules=advice, text_problem=text_problem,
        function_name=pipeline.function_name(jax_adapter.stablehlo_module(t.lowered)),
        verdict=verdict(versions, best, budget, resolution), notes=notes,
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
        declared = declared_fixed(fn, params, name, where)
        reports.append(suggest_target(name, lowered, request, settings, declared, devices, where, logical))
    jax_version, jaxlib_version = jax_adapter.versions()
    run = SuggestRun(tool_version=__version__, jax_version=jax_version, jaxlib_version=jaxlib_version,
                     script=request.path, targets=reports)
    return relativize(run, os.getcwd())

