"""A newcomer's first hour (issue 50), through the console script's own entry point.

The one-line messages themselves are cases of the bad-input corpus
(fixtures/bad_input/corpus/generate.py, 'A newcomer's first mistakes'); here,
what a message cannot show: how soon it comes."""

import os
import subprocess
import sys

from conftest import ROOT

REFUSED_BEFORE_JAX = """
import sys
from jax_shard_lint.analyzer.cli.main import main
code = main(sys.argv[1:])
print(code, 'jax' in sys.modules, 'jaxlib' in sys.modules)
"""


def _main_in_a_fresh_python(*argv):
    env = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    return subprocess.run([sys.executable, "-c", REFUSED_BEFORE_JAX, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_missing_script_or_file_is_refused_before_jax_is_imported(tmp_path):
    for argv in (["lint", str(tmp_path / "nope" / "train.py")], ["check", str(tmp_path / "m.mlir")],
                 ["propagate", str(tmp_path / "m.mlir")], ["run", str(tmp_path / "train.py")],
                 ["lint", str(tmp_path / "train.py") + ":targets"]):
        done = _main_in_a_fresh_python(*argv)
        assert done.stdout.split() == ["2", "False", "False"], (argv, done.stdout, done.stderr[-2000:])
        missing = argv[1].split(":")[0]
        assert done.stderr == f"jax-shard-lint: error: {missing}: no such file\n"


def test_a_module_name_is_not_taken_for_a_missing_file():
    """package.module:function is imported, not opened: the child says what the import said."""
    done = _main_in_a_fresh_python("lint", "no_such_package.steps:targets", "-q")
    assert done.stdout.split()[0] == "2"
    assert "no_such_package.steps: cannot import module: ModuleNotFoundError" in done.stderr
