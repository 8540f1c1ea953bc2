"""The source rules over a whole program (fixtures/multihost/<case>/{bug,fixed}): each case's
hazard is written in one module and made a hazard by another (the multi-process setup, the replicated
sharding, the jitted call whose sharded result is passed in). The findings expected are the ``# E:``
comments of the case's files; the fixed version has none and must be quiet."""

import glob
import os
import re
import sys

import pytest
from conftest import FIXTURES

from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.analyzer.context.program_files import program_files
from jax_shard_lint.passes.rules.source_check import check_program

CASES = os.path.join(FIXTURES, "multihost")
_EXPECT = re.compile(r"#\s*E:\s*([A-Z0-9,\s]+)$")


def _script(folder):
    (script,) = [p for p in glob.glob(os.path.join(folder, "*.py")) if os.path.basename(p) in ("train.py", "main.py")]
    return script


def _expected(folder):
    out = set()
    for path in glob.glob(os.path.join(folder, "**", "*.py"), recursive=True):
        for lineno, line in enumerate(open(path), 1):
            m = _EXPECT.search(line.rstrip())
            if m:
                codes = re.split(r"[,\s]+", m.group(1).strip())
                out |= {(os.path.relpath(path, folder), lineno, c) for c in codes if c}
    return out


def _found(folder, settings=None):
    program = program_files(_script(folder), settings)
    result = check_program(program.texts, program.roots)
    return {(os.path.relpath(f.source.file, folder), f.source.line, f.rule) for f in result.findings}, result


@pytest.mark.parametrize("case", ["literal", "treemap", "elsewhere", "reduction", "passed_step", "pep695"])
@pytest.mark.parametrize("variant", ["bug", "fixed"])
def test_fires_on_the_bug_and_is_quiet_on_the_fix(case, variant):
    folder = os.path.join(CASES, case, variant)
    found, _ = _found(folder)
    expected = _expected(folder)
    assert bool(expected) == (variant == "bug")
    assert found == expected


def test_every_module_the_script_reaches_is_read():
    program = program_files(_script(os.path.join(CASES, "reduction", "bug")))
    assert [os.path.relpath(p, os.path.join(CASES, "reduction", "bug")) for p in program.files] == [
        "main.py", "lcm/__init__.py", "lcm/checks.py", "lcm/solve.py"]


def test_pep695_file_is_read_and_named_when_newer_than_this_python():
    _, result = _found(os.path.join(CASES, "pep695", "bug"))
    if sys.version_info >= (3, 12):
        assert result.notes == ()
    else:
        (note,) = result.notes
        assert note.endswith("tree_utils.py: read with Python 3.14's grammar (parso): newer than this Python's")


def test_a_file_no_grammar_reads_is_named_not_skipped(tmp_path):
    (tmp_path / "train.py").write_text("import broken\n")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    program = program_files(str(tmp_path / "train.py"))
    result = check_program(program.texts, program.roots)
    (note,) = result.notes
    assert note.startswith(str(tmp_path / "broken.py") + ": not analysed: syntax error at line 1")


def test_configured_first_party_package_outside_the_script_folder(tmp_path):
    """The helper lives in a first-party package elsewhere (``first-party = ["libs/"]``)."""
    libs = tmp_path / "libs" / "shardutil"
    libs.mkdir(parents=True)
    (libs / "__init__.py").write_text("")
    (libs / "put.py").write_text(
        "import jax\n\n\ndef place(x, sharding):\n    return jax.device_put(x, sharding)\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "train.py").write_text(
        "import jax\nimport numpy as np\nfrom jax.sharding import NamedSharding, PartitionSpec as P\n"
        "from shardutil.put import place\n\n\ndef main(mesh):\n    jax.distributed.initialize()\n"
        "    return place(np.zeros(4), NamedSharding(mesh, P()))\n")
    without = program_files(str(app / "train.py"))
    assert [os.path.basename(p) for p in without.files] == ["train.py"]
    settings = Settings(first_party=("libs/",), config_file=str(tmp_path / "pyproject.toml"))
    found, _ = _found(str(app), settings)
    assert found == {("../libs/shardutil/put.py", 5, "SL401")}


def test_run_names_a_module_newer_than_this_python_in_its_report(cli, tmp_path):
    """The script runs (it imports the PEP 695 module only in a function it never calls); the report
    names the module as read with a newer grammar on 3.11, and nothing on 3.12."""
    import json
    import shutil

    shutil.copy(os.path.join(CASES, "pep695", "bug", "tree_utils.py"), tmp_path / "tree_utils.py")
    (tmp_path / "train.py").write_text("def later():\n    import tree_utils\n\n\nprint('ran')\n")
    result = cli("run", str(tmp_path / "train.py"), "--format", "json", "-q")
    assert result.code == 0, result.err
    notes = json.loads(result.out)["source_notes"]
    if sys.version_info >= (3, 12):
        assert notes == []
    else:
        (note,) = notes
        assert note.endswith("tree_utils.py: read with Python 3.14's grammar (parso): newer than this Python's")


def _installed_first_party_package(tmp_path):
    """A model package marked first-party, installed in a site-packages beside the libraries it imports:
    nested call levels (model -> block -> layers) and a loop of layers, as transformers' models are."""
    site = tmp_path / "env" / "site-packages"
    pkg = site / "layerlib"
    (pkg / "blocks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .model import Model\n")
    (pkg / "model.py").write_text(
        "from otherlib import helpers\nfrom .blocks.block import block\n\n\n"
        "class Model:\n    def __call__(self, x, layers):\n        for w in layers:\n"
        "            x = block(x, w)\n        return helpers.norm(x)\n")
    (pkg / "blocks" / "__init__.py").write_text("")
    (pkg / "blocks" / "block.py").write_text(
        "import numpy as np\nfrom . import dense\n\n\ndef block(x, w):\n    return dense.apply(x, w)\n")
    (pkg / "blocks" / "dense.py").write_text("import otherlib.ops\n\n\ndef apply(x, w):\n    return x @ w\n")
    # The libraries beside it, each importing the next: never the user's program.
    for i in range(3):
        lib = site / ("otherlib" if i == 0 else f"otherlib{i}")
        lib.mkdir()
        after = f"import otherlib{i + 1}\n" if i < 2 else ""
        (lib / "__init__.py").write_text(after)
        (lib / "helpers.py").write_text(after + "def norm(x):\n    return x\n")
        (lib / "ops.py").write_text(after)
    app = tmp_path / "app"
    app.mkdir()
    (app / "train.py").write_text(
        "import jax\nfrom layerlib import Model\n\n\ndef train_step(x, layers):\n    return Model()(x, layers)\n")
    return site, app


def test_first_party_package_is_the_program_not_the_folder_holding_it(tmp_path, monkeypatch):
    """``first-party = ["layerlib"]`` names a package in site-packages: its modules are the program, and
    module names resolve from site-packages, but the libraries beside it are neither read nor analysed
    (reading the folder holding it made ``first-party = ["transformers"]`` read every installed library
    transformers imports, transitively: over 14 minutes and 6 GB before the report)."""
    site, app = _installed_first_party_package(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    settings = Settings(first_party=("layerlib",), config_file=str(app / "pyproject.toml"))
    program = program_files(str(app / "train.py"), settings)
    assert [os.path.relpath(p, tmp_path) for p in program.files] == [
        "app/train.py", "env/site-packages/layerlib/__init__.py", "env/site-packages/layerlib/blocks/__init__.py",
        "env/site-packages/layerlib/blocks/block.py", "env/site-packages/layerlib/blocks/dense.py",
        "env/site-packages/layerlib/model.py"]
    assert sorted(program.texts) == sorted(program.files)
    assert str(site) in program.roots
    (app / "blocks_only.py").write_text("from layerlib.blocks.block import block\n")
    sub = program_files(str(app / "blocks_only.py"), Settings(first_party=("layerlib.blocks",),
                                                               config_file=str(app / "pyproject.toml")))
    assert [os.path.relpath(p, tmp_path) for p in sub.files] == [
        "app/blocks_only.py", "env/site-packages/layerlib/blocks/__init__.py",
        "env/site-packages/layerlib/blocks/block.py", "env/site-packages/layerlib/blocks/dense.py"]


def test_imports_under_type_checking_are_not_followed(tmp_path):
    """A lazily loaded package (transformers) imports all its modules under ``if TYPE_CHECKING:``, and
    nothing there runs: the walk reads the ``else`` branch only."""
    (tmp_path / "train.py").write_text(
        "import typing\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import typed\n"
        "else:\n    import lazy\nif typing.TYPE_CHECKING:\n    import typed_too\n\n\ndef f():\n    import inner\n")
    for name in ("typed", "lazy", "typed_too", "inner"):
        (tmp_path / f"{name}.py").write_text("")
    program = program_files(str(tmp_path / "train.py"))
    assert [os.path.basename(p) for p in program.files] == ["train.py", "inner.py", "lazy.py"]
