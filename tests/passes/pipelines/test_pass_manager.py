"""The pass manager (passes/pipelines/pass_manager.py): a failing stage keeps its exception (type and
message, so a caller catching it still does) and names itself, innermost stage first; the CLI's
internal-error line says which pass failed."""

import pytest

from jax_shard_lint.passes.pipelines.lint import LINT
from jax_shard_lint.passes.pipelines.pass_manager import Pipeline, failed_pass

TOY = Pipeline("toy", ("source-parse", "rules", "suppressions"))


def _bad(x):
    return x + "1"  # TypeError for an int


def test_a_failing_stage_keeps_its_exception_and_names_itself():
    assert TOY.run("source-parse", len, "abc") == 3
    with pytest.raises(TypeError) as info:
        TOY.run("rules", _bad, 1)
    assert failed_pass(info.value) == "pass 'rules' (stage 2 of pipeline toy)"
    assert str(info.value) == 'unsupported operand type(s) for +: \'int\' and \'str\''


def test_the_innermost_stage_is_named_once():
    with pytest.raises(TypeError) as info:
        TOY.run("suppressions", TOY.run, "rules", _bad, 1)
    assert failed_pass(info.value) == "pass 'rules' (stage 2 of pipeline toy)"
    assert len(info.value.__notes__) == 1


def test_an_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="no stage 'parse'"):
        TOY.run("parse", len, "abc")
    assert failed_pass(ValueError("x")) is None


def test_the_cli_names_the_failing_pass(monkeypatch, capsys):
    from jax_shard_lint.analyzer.cli import dispatch
    from jax_shard_lint.analyzer.cli.main import run_command

    def lint_with_a_bug(args):
        return LINT.run("rules", _bad, 1)

    monkeypatch.setitem(dispatch.COMMANDS, "lint", lint_with_a_bug)
    assert run_command(["lint", "examples/fsdp_tp_train_step.py", "-q"]) == 3
    err = capsys.readouterr().err
    assert "jax-shard-lint: internal error in pass 'rules' (stage 14 of pipeline lint): TypeError: " in err
