"""The schedules the pass manager checks (passes/pipelines/pass_manager.py): a stage listed twice in a
pipeline, or not declared in STAGES, is refused when the pipeline is made; every pipeline's stage numbers,
as its functions' docstrings (``Stage 3: ...``) and docs/passes.md give them, are its schedule's."""

import ast
import glob
import importlib
import os
import re

import pytest
from conftest import ROOT

from jax_shard_lint.passes.pipelines.pass_manager import STAGES, Pipeline, ScheduleError

pytestmark = pytest.mark.jax_free

_LABEL = re.compile(r"^Stages? (\d+)(?: (and|to) (\d+))?")


def _pipeline_modules():
    for path in sorted(glob.glob(os.path.join(ROOT, "passes", "pipelines", "*.py"))):
        name = os.path.basename(path)[:-3]
        yield path, importlib.import_module(f"jax_shard_lint.passes.pipelines.{name}")


def _pipelines() -> dict[str, Pipeline]:
    return {p.name: p for _, m in _pipeline_modules() for p in vars(m).values() if isinstance(p, Pipeline)}


def test_a_stage_listed_twice_is_refused():
    with pytest.raises(ScheduleError, match="lists rules more than once"):
        Pipeline("twice", ("hlo-parse", "rules", "rules"))


def test_an_undeclared_stage_is_refused():
    with pytest.raises(ScheduleError, match="parse-it not declared in STAGES"):
        Pipeline("toy", ("hlo-parse", "parse-it"))


def test_every_declared_stage_is_in_a_pipeline():
    used = {s for p in _pipelines().values() for s in p.stages}
    assert set(STAGES) - used == set()


def test_every_stage_run_is_in_its_pipeline():
    """Each ``PIPELINE.run("stage", ...)`` in passes/pipelines names a stage of that pipeline (one that is not
    raises only when it runs)."""
    wrong, checked = [], 0
    for path, module in _pipeline_modules():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            f = call.func
            if (isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name)
                    and isinstance(pipeline := getattr(module, f.value.id, None), Pipeline) and call.args
                    and isinstance(call.args[0], ast.Constant)):
                checked += 1
                if call.args[0].value not in pipeline.stages:
                    wrong.append(f"{os.path.basename(path)}:{call.lineno} {pipeline.name}: {call.args[0].value!r}")
    assert wrong == []
    assert checked >= 60


def test_stage_labels_in_docstrings_are_the_schedule():
    """A function whose docstring says ``Stage N`` (``Stages N and M``, ``Stages N to M``) runs only stages
    at those places of its pipeline."""
    wrong, checked = [], 0
    for path, module in _pipeline_modules():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            doc = ast.get_docstring(fn) or ""
            if not (m := _LABEL.match(doc)):
                continue
            first, how, last = int(m.group(1)), m.group(2), int(m.group(3) or m.group(1))
            allowed = set(range(first, last + 1)) if how == "to" else {first, last}
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                f = call.func
                if (isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name)
                        and isinstance(getattr(module, f.value.id, None), Pipeline) and call.args
                        and isinstance(call.args[0], ast.Constant)):
                    number = getattr(module, f.value.id).number(call.args[0].value)
                    checked += 1
                    if number not in allowed:
                        wrong.append(f"{os.path.basename(path)}:{call.lineno} {fn.name} says {m.group(0)}, "
                                     f"runs {call.args[0].value!r} (stage {number})")
    assert wrong == []
    assert checked >= 30  # the labelled stage functions of lint, propagate, rewrite, run-wide, suggest, ...


def test_docs_number_every_stage_as_its_schedule():
    """docs/passes.md's ``name``: 1 stage, 2 stage, ... lists are the pipelines' schedules."""
    with open(os.path.join(ROOT, "docs", "passes.md"), encoding="utf-8") as f:
        docs = f.read()
    wrong, listed_pipelines = {}, 0
    for name, pipeline in _pipelines().items():
        at = docs.find(f"`{name}`: ")
        if at < 0:
            continue
        listed = docs[at + len(name) + 4:].split(";")[0].split("|")[0]
        numbered = [(int(n), s) for n, s in re.findall(r"\b(\d+) ([a-z][a-z-]*)", listed) if s in STAGES]
        listed_pipelines += bool(numbered)
        if numbered and numbered != [(k + 1, s) for k, s in enumerate(pipeline.stages)]:
            wrong[name] = numbered
    assert wrong == {}
    assert listed_pipelines >= 9
