"""``suggest``: the ILP's choice is the brute-force optimum of its cost model;
the suggestion, compiled by XLA, fits the budget and is no slower than the
written shardings; its Python text pastes into ``jax.jit`` and gives XLA's
compiled program exactly the suggested shardings."""

import inspect
import itertools
import json
import os
from functools import partial

import jax
import jax.numpy as jnp
import pytest
from ci_deps import require
from conftest import EXAMPLES
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.commands.suggest.target import SuggestRequest, target_problem
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.passes.models.errors import NoFeasibleSharding
from jax_shard_lint.passes.solver.local_search import local_search
from jax_shard_lint.passes.solver.sharding_problem import Assignment, evaluate
from jax_shard_lint.passes.solver.solve import solve

VALUE = os.path.join("examples", "value_function_step.py")
FSDP = os.path.join("examples", "fsdp_tp_train_step.py")
EQUINOX = os.path.join(EXAMPLES, "models", "equinox_mlp.py")
MAXTEXT = os.path.join("examples", "maxtext_like_step.py")
SHARD_MAP = os.path.join("examples", "shard_map_tp_step.py")
SMALL_MAXTEXT = ("--set", "layers=2", "--set", "d_model=256", "--set", "d_ff=512", "--set", "vocab=1024",
                 "--set", "seq=256")


def _mesh(shape, names):
    n = 1
    for s in shape:
        n *= s
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape), devices=jax.devices()[:n])


def _lowered(fn, mesh, *specs_and_shapes, **jit):
    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
            for shape, spec in specs_and_shapes]
    return jax.jit(fn, **jit).lower(*args)


def _problem_of(lowered, budget=None):
    settings = Settings(devices=8, budget_bytes=budget)
    return target_problem("t", lowered, SuggestRequest(path="t.py"), settings, {}, "t.py").problem


def brute_force(problem) -> float:
    """The least cost over every assignment of candidates to groups (ops then take their
    cheapest strategy given their groups, which is exact: an op's cost depends on its
    own strategy and its groups only), subject to ties and the budget."""
    free = [g.id for g in problem.groups if len(g.candidates) > 1]
    best = float("inf")
    for combo in itertools.product(*(range(len(problem.groups[g].candidates)) for g in free)):
        groups = [0] * len(problem.groups)
        for g, c in zip(free, combo):
            groups[g] = c
        if any(groups[a] != groups[b] for a, b in problem.ties):
            continue
        if problem.budget_bytes is not None and \
                sum(m.bytes[groups[m.group]] for m in problem.memory) > problem.budget_bytes:
            continue
        ops = tuple(min(range(len(op.strategies)), key=lambda s: op.seconds[s] + sum(
            u.seconds[u.wanted[s]][groups[u.group]] for u in op.uses)) for op in problem.ops)
        best = min(best, evaluate(problem, Assignment(tuple(groups), ops))[0])
    return best


def _programs():
    line = _mesh((2,), ("d",))
    grid = _mesh((2, 2), ("a", "b"))
    yield "mlp on 2 devices", _lowered(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, line,
                                       ((8, 16), P()), ((16, 8), P()), ((8, 4), P())), None
    yield "matmul and reduce on 2x2", _lowered(lambda x, w: (x @ w).sum(0), grid,
                                               ((4, 8), P()), ((8, 4), P())), None
    # A state update that comes back: the tie keeps w's layout a fixed point.
    yield "state step on 2x2", _lowered(lambda w, x: w - 0.1 * (x @ w), grid,
                                        ((4, 4), P()), ((4, 4), P())), None
    # A budget below the unconstrained optimum's memory: the constraint binds.
    yield "budgeted on 2x2", _lowered(lambda x, w: jnp.tanh(x @ w), grid,
                                      ((32, 32), P()), ((32, 32), P())), "below the optimum"
    # A shard_map keeps its specs; the solver chooses around it (and, where it leaves 'a' to
    # jit, inside it).
    for manual in ({"b"}, {"a", "b"}):
        yield f"shard_map over {''.join(sorted(manual))} on 2x2", _lowered(
            partial(_row_parallel, grid, manual), grid, ((8, 8), P()), ((8, 8), P())), None


def _row_parallel(mesh, manual, x, w):
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(None, "b"), P("b", None)), out_specs=P(), axis_names=manual)
    def block(x, w):
        return jax.lax.psum(x @ w, "b")

    return jnp.tanh(block(x, w))


@pytest.mark.parametrize("name, lowered, budget", list(_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_ilp_finds_the_brute_force_optimum(name, lowered, budget):
    if budget is not None:
        free = solve(_problem_of(lowered), "ilp")
        budget = free.memory_bytes - 1
    problem = _problem_of(lowered, budget)
    optimum = brute_force(problem)
    solution = solve(problem, "ilp")
    assert solution.seconds == pytest.approx(optimum, rel=1e-6, abs=1e-12)
    assert solution.gap is not None and solution.gap <= 1e-6
    if budget is not None:
        assert solution.memory_bytes <= budget < free.memory_bytes
        assert optimum >= free.seconds - 1e-12
    # The local search is a heuristic: never better than the optimum.
    heuristic = evaluate(problem, local_search(problem))[0]
    assert heuristic >= optimum - 1e-12


@pytest.mark.parametrize("manual", [{"b"}, {"a", "b"}], ids=["partial", "full"])
def test_a_shard_map_keeps_its_specs_and_the_solver_chooses_around_them(manual):
    grid = _mesh((2, 2), ("a", "b"))
    lowered = _lowered(partial(_row_parallel, grid, manual), grid, ((8, 8), P()), ((8, 8), P()))
    target = target_problem("t", lowered, SuggestRequest(path="t.py"), Settings(devices=8), {}, "t.py")
    tensors, groups = target.graph.tensors, target.problem.groups
    body = [x for x in groups if tensors[x.tensors[0]].manual_axes]
    assert body and all(a not in manual for x in body for c in x.candidates for axes in c for a in axes)
    # Inside a partial-manual body, 'a' is jit's to place: the solver may.
    assert any("a" in axes for x in body for c in x.candidates for axes in c) == ("a" not in manual)
    # The in_specs as written: 'b' first on the second dimension of x, the first of w, in every candidate.
    specs = [x for x in groups if any(tensors[i].seed == "shard_map in_specs" for i in x.tensors)]
    assert len(specs) == 2 and all(sum(axes.count("b") for axes in c) == 1 and ("b",) in (c[0][:1], c[1][:1])
                                   for x in specs for c in x.candidates)


def test_an_impossible_budget_is_a_clear_error():
    problem = _problem_of(next(p for n, p, _ in _programs() if n == "budgeted on 2x2"), budget=100)
    with pytest.raises(NoFeasibleSharding, match="fits the arguments and results in the budget"):
        solve(problem, "ilp")


def _suggest(cli, *args):
    result = cli("suggest", *args, "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


def _version(report, name):
    return next(v for v in report["versions"] if v["name"] == name)


def test_value_function_step_moves_the_sharding_to_the_discrete_axis(cli):
    [r] = _suggest(cli, VALUE, "--target", "sharded_on_grid")
    v_next = next(a for a in r["arguments"] if a["path"] == "v_next")
    assert v_next["current"] == [[], ["x"]]  # the grid axis the interpolation reads
    assert v_next["suggested"] == [["x"], []]  # the discrete state axis
    assert r["chosen"] == "solver" and r["solver"]["method"] in ("lp (integral)", "lp (rounded)", "ilp")
    assert r["solver"]["gap"] <= 1e-6 and r["solver"]["certified_gap"] <= 1e-6
    assert r["solver"]["lp_bound_seconds"] <= r["solver"]["objective_seconds"] * (1 + 1e-6)
    solver, written = _version(r, "solver"), _version(r, "written")
    assert solver["collective_bytes"] == 0 < written["collective_bytes"]
    assert solver["estimated_seconds"] < written["estimated_seconds"]
    assert solver["peak_bytes"] < written["peak_bytes"]


def _assert_compiled_as_suggested(compiled, r, mesh):
    """XLA's compiled input shardings are the suggestion's, argument by argument."""
    for got, a in zip(jax.tree.leaves(compiled.input_shardings[0]), r["arguments"]):
        want = NamedSharding(mesh, P(*[tuple(x) if x else None for x in a["suggested"]]))
        assert got.is_equivalent_to(want, len(a["shape"])), (a["path"], got)


def test_value_function_text_pastes_into_jit_and_xla_compiles_those_shardings(cli):
    [r] = _suggest(cli, VALUE, "--target", "sharded_on_grid")
    module = script_module(os.path.join(EXAMPLES, "value_function_step.py"))
    lowered = module.shard_lint_targets()["sharded_on_grid"]
    mesh = jax_adapter.lowered_mesh(lowered)
    names = list(inspect.signature(module.bellman_step).parameters)
    args = [jax.ShapeDtypeStruct(a.shape, jax_adapter.arg_info_dtype(a)) for a in lowered.args_info[0]]
    namespace = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, **dict(zip(names, args))}
    in_shardings = eval(r["in_shardings_text"].removeprefix("in_shardings="), namespace)
    out_shardings = eval(r["out_shardings_text"].removeprefix("out_shardings="), namespace)
    compiled = jax.jit(module.bellman_step, in_shardings=in_shardings, out_shardings=out_shardings) \
        .lower(*args).compile()
    _assert_compiled_as_suggested(compiled, r, mesh)
    # XLA's own accounting of the pasted program agrees with the suggestion's per-device bytes.
    stats = compiled.memory_analysis()
    assert stats.argument_size_in_bytes == sum(a["suggested_per_device_bytes"] for a in r["arguments"])
    assert not any(op in compiled.as_text() for op in ("all-gather", "all-reduce", "all-to-all"))


def test_value_function_printed_python_names_the_function_and_pastes(cli):
    """The Python block suggest prints, pasted as printed with only the user's Mesh bound to ``mesh`` (its
    comment says so), jits the script's own function (by its name, not a placeholder) and XLA compiles the
    suggested shardings."""
    from jax_shard_lint.passes.models.suggest import SuggestReport
    from jax_shard_lint.reports.suggest.summary import jit_code

    [r] = _suggest(cli, VALUE, "--target", "sharded_on_grid")
    module = script_module(os.path.join(EXAMPLES, "value_function_step.py"))
    assert r["function_name"] == module.bellman_step.__name__
    lowered = module.shard_lint_targets()["sharded_on_grid"]
    mesh = jax_adapter.lowered_mesh(lowered)
    code = jit_code(SuggestReport.model_validate(r))
    assert code is not None and code.startswith("# mesh: your jax.sharding.Mesh (")
    assert f"jax.jit({module.bellman_step.__name__}, in_shardings=" in code
    namespace = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh,
                 module.bellman_step.__name__: module.bellman_step}
    at = code.rindex("jax.jit(")
    exec(code[:at] + "jitted = " + code[at:], namespace)  # noqa: S102 - the printed text, as a user pastes it
    jitted = namespace["jitted"]
    args = [jax.ShapeDtypeStruct(a.shape, jax_adapter.arg_info_dtype(a)) for a in lowered.args_info[0]]
    _assert_compiled_as_suggested(jitted.lower(*args).compile(), r, mesh)


def test_the_function_name_is_the_jitted_function_s_or_none_for_a_lambda():
    from jax_shard_lint.passes.stablehlo.module import jitted_function_name

    def bellman_update(x):
        return x * 2

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    named = jax_adapter.stablehlo_module(jax.jit(bellman_update).lower(x))
    anonymous = jax_adapter.stablehlo_module(jax.jit(lambda x: x * 2).lower(x))
    assert jitted_function_name(named) == bellman_update.__name__
    assert jitted_function_name(anonymous) is None


def test_a_shard_map_step_text_pastes_and_is_no_slower(cli):
    """A Megatron block under shard_map: its specs stay; the weights around it are chosen. The text
    pastes into jax.jit and XLA compiles those shardings, its argument bytes the suggestion's."""
    [r] = _suggest(cli, SHARD_MAP)
    assert r["text_problem"] is None, r["text_problem"]
    chosen, written = _version(r, r["chosen"]), _version(r, "written")
    assert r["chosen"] == "solver" and chosen["estimated_seconds"] < written["estimated_seconds"]
    module = script_module(os.path.join(EXAMPLES, "shard_map_tp_step.py"))
    lowered = module.shard_lint_targets()["train_step"]
    mesh = jax_adapter.lowered_mesh(lowered)
    params, x, y = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, jax_adapter.arg_info_dtype(a)),
                                lowered.args_info[0])
    namespace = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, "params": params}
    compiled = jax.jit(lambda params, x, y: module.train_step(params, x, y, mesh),
                       in_shardings=eval(r["in_shardings_text"].removeprefix("in_shardings="), namespace),
                       out_shardings=eval(r["out_shardings_text"].removeprefix("out_shardings="), namespace),
                       ).lower(params, x, y).compile()
    _assert_compiled_as_suggested(compiled, r, mesh)
    assert compiled.memory_analysis().argument_size_in_bytes == sum(
        a["suggested_per_device_bytes"] for a in r["arguments"])


@pytest.mark.slow  # over 30 s: run on the pinned JAX only in CI (.ci/run)
def test_fsdp_tp_step_under_an_h100_budget_fits_and_is_no_slower(cli):
    [r] = _suggest(cli, FSDP, "--platform", "h100")
    assert r["platform"].startswith("h100") and r["budget_bytes"] > 70 * 2**30
    chosen, written = _version(r, r["chosen"]), _version(r, "written")
    assert chosen["fits"] and chosen["peak_bytes"] <= r["budget_bytes"]
    assert chosen["estimated_seconds"] <= written["estimated_seconds"]
    assert r["solver"]["gap"] is not None and r["in_shardings_text"] and r["out_shardings_text"]
    assert {v["name"] for v in r["versions"]} == {"solver", "written", "replicated", "data-parallel", "fsdp",
                                                  "single move"}
    # The best single move of a mesh axis off the written layout is a baseline the choice never loses to.
    assert chosen["estimated_seconds"] <= _version(r, "single move")["estimated_seconds"]


@pytest.mark.slow  # over 30 s: run on the pinned JAX only in CI (.ci/run)
def test_equinox_optax_step_text_checks(cli):
    require("equinox", "equinox is not installed (the [test] extra)")
    require("optax", "optax is not installed (the [test] extra)")
    [r] = _suggest(cli, EQUINOX)
    assert r["text_problem"] is None, r["text_problem"]
    # optax's ScaleByAdamState has no literal spelling: it is written as a map over key paths.
    assert "jax.tree_util.tree_map_with_path" in r["in_shardings_text"]
    assert r["abstract_inputs_text"], "the with_shardings helper checked on an optax state and an Equinox module"
    assert _version(r, r["chosen"])["estimated_seconds"] <= _version(r, "written")["estimated_seconds"]


def test_fix_keeps_an_argument_as_written(cli):
    [r] = _suggest(cli, VALUE, "--target", "sharded_on_grid", "--fix", "v_next")
    v_next = next(a for a in r["arguments"] if a["path"] == "v_next")
    assert v_next["suggested"] == v_next["current"] == [[], ["x"]]
    assert v_next["pinned"] == "--fix v_next"


@pytest.mark.parametrize("argv, message", [
    (["--fix", "nope"], "--fix: no argument 'nope' (arguments: v_next, grid, income, choices)"),
    (["--fix", "v_next=P('y')"], "--fix: P('y'): no mesh axis 'y' (mesh: x)"),
    (["--axes", "y"], "--axes: no mesh axis 'y' (mesh: x)"),
    (["--budget", "1KiB"], f"{VALUE}: target 'sharded_on_grid': no choice of candidates fits the arguments and "
                           "results in the budget (1.0 KiB for arguments and results)"),
])
def test_bad_suggest_options(cli, argv, message):
    result = cli("suggest", VALUE, "--target", "sharded_on_grid", *argv)
    assert result.code == 2 and result.out == ""
    assert result.err.strip().splitlines() == [f"jax-shard-lint: error: {message}"]


def test_time_limit_is_deprecated_with_one_line_and_changes_nothing(cli):
    """--time-limit stops nothing (a node count bounds each solve): accepted, with one warning line on stderr."""
    result = cli("suggest", VALUE, "--target", "sharded_on_grid", "--time-limit", "0", "--fix", "nope")
    assert result.code == 2 and result.out == ""
    assert result.err.strip().splitlines() == [
        "jax-shard-lint: warning: --time-limit is deprecated and does nothing: a node count, not a clock, bounds "
        "each solve",
        "jax-shard-lint: error: --fix: no argument 'nope' (arguments: v_next, grid, income, choices)"]


def test_a_target_without_a_mesh_is_named(cli, tmp_path):
    script = tmp_path / "one_device.py"
    script.write_text("import jax, jax.numpy as jnp\n\ndef shard_lint_targets():\n"
                      "    return {'f': jax.jit(lambda x: x * 2).lower(jax.ShapeDtypeStruct((4,), jnp.float32))}\n")
    result = cli("suggest", str(script))
    assert result.code == 2
    assert "target 'f' has no mesh of several devices to shard over" in result.err


def test_loop_trip_counts_reach_the_functions_a_scan_body_calls():
    # jax.checkpoint puts a scan's body in a function (closed_call) the loop calls: its
    # values run once per iteration. The oracle is XLA's known_trip_count of the loop.
    from jax_shard_lint.passes.hlo.parser import parse_hlo_module
    from jax_shard_lint.passes.propagation.call_graph import flatten_call_graph
    from jax_shard_lint.passes.propagation.sharding_graph import build_graph
    from jax_shard_lint.passes.propagation.shardy_reference import with_sharding_rules
    from jax_shard_lint.passes.stablehlo.loop_trips import value_repeats

    def step(h, ws):
        return jax.lax.scan(lambda h, w: (jax.checkpoint(lambda h, w: jnp.tanh(h @ w))(h, w), None), h, ws)[0]

    mesh = _mesh((8,), ("x",))
    lowered = _lowered(step, mesh, ((64, 32), P("x")), ((5, 32, 32), P()))
    known = [i.backend_config().get("known_trip_count", {}).get("n")
             for c in parse_hlo_module(lowered.compile().as_text()).computations.values()
             for i in c.instructions if i.opcode == "while"]
    assert known == ["5"]
    ruled = with_sharding_rules(flatten_call_graph(jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered))))
    g = build_graph(ruled)
    repeats = value_repeats(ruled, g.value_ids)
    dots = [s for s in g.steps if s.op == "stablehlo.dot_general"]
    assert "func.call" in str(ruled) and dots
    assert all(repeats.get(s.tensors[-1]) == 5 for s in dots)


def test_a_leaf_jit_prunes_keeps_its_place_in_the_pasted_text(cli):
    """MaxText's batch carries ``targets_position``, which the step never reads: jit drops it from the module
    (74 module arguments for 75 leaves), and building the in_shardings text by leaf number raised IndexError.
    The text names every leaf, pastes into jax.jit and gives each module argument its suggestion."""
    [r] = _suggest(cli, MAXTEXT, *SMALL_MAXTEXT)
    assert r["text_problem"] is None, r["text_problem"]
    assert not any("targets_position" in a["path"] for a in r["arguments"])  # pruned: not a module argument
    assert r["abstract_inputs_text"], "the with_shardings helper checked with a pruned leaf"
    assert r["in_shardings_text"].startswith("in_shardings=(")


def test_the_verdict_compares_the_solver_with_the_chosen_version():
    """Written 16.1 ms, replicated 23.8, solver 23.9: the solver is within 1% of the replicated
    version, not of the chosen one, so it compiled slower (it once read "within 1%")."""
    from jax_shard_lint.analyzer.backend.advice.verdict import best_version, verdict
    from jax_shard_lint.passes.models.suggest import Version

    def v(name, seconds, peak):
        return Version(name=name, description="", peak_bytes=peak, fits=None, collective_bytes=0,
                       collective_count=0, estimated_seconds=seconds)

    versions = [v("solver", 0.0239, 19 << 20), v("written", 0.0161, 24 << 20), v("replicated", 0.0238, 19 << 20)]
    best = best_version(versions)
    assert best.name == "written"
    text = verdict(versions, best, None)
    assert "the solver's own choice compiled slower (23.9 ms)" in text and "within 1%" not in text
