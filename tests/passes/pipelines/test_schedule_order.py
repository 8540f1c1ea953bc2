"""The pipelines' order, against their declared preconditions (``Pipeline.reads``): a stage that would run
before a stage whose result it reads is refused when the pipeline is made; every pipeline declares what each
of its stages reads; and the declarations hold what the pipelines' code does: a value one stage's run makes
(or one computed from it) handed to another stage's run of the same pipeline is a read that stage declares."""

from __future__ import annotations

import ast

import pytest
from test_schedules import _pipeline_modules, _pipelines

from jax_shard_lint.passes.pipelines.pass_manager import Pipeline, ScheduleError


def test_a_stage_before_one_it_reads_is_refused():
    Pipeline("in-order", ("hlo-parse", "collectives"), reads={"collectives": ("hlo-parse",)})
    with pytest.raises(ScheduleError, match=r"collectives \(stage 1\) reads hlo-parse, which runs after it "
                                            r"\(stage 2\)"):
        Pipeline("swapped", ("collectives", "hlo-parse"), reads={"collectives": ("hlo-parse",)})


def test_a_read_of_a_stage_the_pipeline_lacks_is_refused():
    with pytest.raises(ScheduleError, match="collectives reads hlo-parse, which it does not run"):
        Pipeline("toy", ("collectives", "rules"), reads={"collectives": ("hlo-parse",)})
    with pytest.raises(ScheduleError, match="reads of memory, which it does not run"):
        Pipeline("toy", ("collectives",), reads={"memory": ()})


def test_every_pipeline_declares_each_stages_reads():
    pipelines = _pipelines()
    assert len(pipelines) >= 10
    assert {name: sorted(set(p.stages) ^ set(p.reads)) for name, p in pipelines.items()
            if set(p.stages) != set(p.reads)} == {}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def stage_flow(tree: ast.Module, pipelines: dict[str, Pipeline]) -> set[tuple[str, str, str]]:
    """(pipeline, stage, stage it reads) for each run of a stage whose arguments hold a value that another
    stage's run of the same pipeline made, in the same function: bound by an assignment from the run (or
    from a function of this module that returns that one stage's run, as ``read_entry``), or computed from
    such a value. Statements are taken in source order; a name bound again carries its new value's stages."""
    def run_of(node: ast.AST) -> tuple[str, str] | None:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in pipelines and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            return pipelines[node.func.value.id].name, node.args[0].value
        return None

    returns_a_run = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            runs = {run_of(r.value) for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None}
            if len(runs) == 1 and None not in runs:
                returns_a_run[fn.name] = runs.pop()

    def made_by(node: ast.AST) -> tuple[str, str] | None:
        if (found := run_of(node)) is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            found = returns_a_run.get(node.func.id)
        return found

    flow = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        events = []  # (where, 0: a run reads its arguments | 1: an assignment binds its targets, node)
        for node in ast.walk(fn):
            if run_of(node) is not None:
                events.append(((node.lineno, node.col_offset), 0, node))
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
                events.append(((node.end_lineno, node.end_col_offset), 1, node))
        made: dict[str, set[tuple[str, str]]] = {}
        for _, kind, node in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == 0:
                assert isinstance(node, ast.Call)
                pipeline, stage = run_of(node) or ("", "")
                handed = set().union(*(_names(a) for a in node.args[1:]), *(_names(k.value) for k in node.keywords))
                flow |= {(pipeline, stage, s) for n in handed for p, s in made.get(n, ()) if p == pipeline
                         and s != stage}
                continue
            assert isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None
            runs = {r for c in ast.walk(node.value) if (r := made_by(c)) is not None}
            value = runs or set().union(*(made.get(n, set()) for n in _names(node.value)))
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in _names(target):
                    made[n] = value | (made.get(n, set()) if isinstance(node, ast.AugAssign) else set())
    return flow


def test_the_flow_finder_follows_values_between_stages():
    p = Pipeline("toy", ("hlo-parse", "collectives", "step-time", "rules"))
    tree = ast.parse(
        "def parsed(text):\n    return P.run('hlo-parse', parse, text)\n"
        "def f(text, config):\n"
        "    hlo = parsed(text)\n"
        "    found = P.run('collectives', find, hlo, config).collectives\n"
        "    sized = [c for c in found]\n"
        "    time, found = P.run('step-time', timed, hlo, collectives=sized)\n"
        "    return P.run('rules', check, time, config)\n")
    assert stage_flow(tree, {"P": p}) == {("toy", "collectives", "hlo-parse"), ("toy", "step-time", "hlo-parse"),
                                         ("toy", "step-time", "collectives"), ("toy", "rules", "step-time")}


def test_what_the_code_hands_between_stages_is_declared():
    undeclared, seen = [], 0
    for path, module in _pipeline_modules():
        pipelines = {k: v for k, v in vars(module).items() if isinstance(v, Pipeline)}
        if not pipelines:
            continue
        with open(path, encoding="utf-8") as f:
            flow = stage_flow(ast.parse(f.read()), pipelines)
        seen += len(flow)
        by_name = {p.name: p for p in pipelines.values()}
        undeclared += sorted(f"{name}: {stage} reads {read}" for name, stage, read in flow
                             if read not in by_name[name].reads.get(stage, ()))
    assert undeclared == []
    assert seen >= 60  # lint's, check-hlo's, propagate's, fix-checks' and suggest's flows between stages
