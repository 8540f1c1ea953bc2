""".ci/mutation.toml stays true to the code: every module it mutates exists, every function it bounds a
module to is defined there, every test it runs exists, and every recorded score names a configured
module. (The mutation run itself takes minutes per module: .ci/mutation, outside the suite.)"""

import ast
import json
import os
import tomllib

import pytest
from conftest import ROOT

pytestmark = pytest.mark.jax_free

CONFIG = os.path.join(ROOT, ".ci", "mutation.toml")
SCORES = os.path.join(ROOT, ".ci", "mutation-scores.json")


def _modules():
    with open(CONFIG, "rb") as f:
        return tomllib.load(f)["module"]


def test_every_configured_module_function_and_test_exists():
    modules = _modules()
    assert {m["path"].split("/")[1] for m in modules} >= {"hlo", "propagation", "solver", "rules", "common"}
    for m in modules:
        path = os.path.join(ROOT, m["path"])
        assert os.path.isfile(path), m["path"]
        with open(path) as f:
            defined = {n.name for n in ast.walk(ast.parse(f.read()))
                       if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        assert set(m.get("functions", [])) <= defined, (m["path"], set(m["functions"]) - defined)
        for test in m["tests"]:
            file, _, name = test.partition("::")
            assert os.path.exists(os.path.join(ROOT, file)), test
            if name:
                with open(os.path.join(ROOT, file)) as f:
                    assert f"def {name}(" in f.read(), test


def test_recorded_scores_are_of_configured_modules():
    if not os.path.exists(SCORES):
        return
    with open(SCORES) as f:
        recorded = json.load(f)["modules"]
    configured = {m["path"] for m in _modules()}
    assert set(recorded) <= configured
    assert all(0 <= r["score"] <= 1 and r["killed"] <= r["mutants"] for r in recorded.values())
