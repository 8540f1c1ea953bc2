"""Each command resolves the run's target once, at its start (backend/run_target.py's resolve_run_target):
counted by the resolutions the front end makes (resolve_spec: a GPU spec read, a TPU slice chosen) while
the command runs in this process; an executor's child is handed the target and resolves none."""

import json
import os

import pytest

from jax_shard_lint.analyzer.backend import run_target
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.analyzer.executors import checked_in_tasks
from jax_shard_lint.analyzer.executors.choice import ExecutorChoice
from jax_shard_lint.analyzer.platforms.target_wire import target_of_text, target_text

SCRIPT = os.path.join("fixtures", "gate", "step_v1.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")


@pytest.fixture
def resolutions(monkeypatch):
    calls = []
    real = run_target.resolve_spec

    def counted(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(run_target, "resolve_spec", counted)
    return calls


def test_each_command_resolves_its_target_once(cli, resolutions, tmp_path):
    snapshot = str(tmp_path / "snap")
    for argv in (("lint", SCRIPT), ("snapshot", SCRIPT, "-o", snapshot, "-q"), ("check", snapshot),
                 ("suggest", SCRIPT),
                 ("fit", REMAT, "--param", "batch", "--budget", "1GiB", "--multiple-of", "4", "--range", "4:8",
                  "--set", "layers=1")):
        resolutions.clear()
        result = cli(*argv, "--format", "json") if argv[0] != "snapshot" else cli(*argv)
        assert result.code in (0, 1), result.err
        assert len(resolutions) == 1, argv[0]
    assert resolutions == ["cpu"]


def test_a_child_is_handed_the_target_and_resolves_none(resolutions, monkeypatch):
    from jax_shard_lint.analyzer.cli.main import build_parser
    from jax_shard_lint.analyzer.cli.settings import settings_from_args

    settings, _ = run_target.resolve_run_target(Settings(platform="cpu", devices=8))
    assert resolutions == ["cpu"]
    seen = []

    def tasks_run(executor, tasks, bundle, on_done):
        seen.extend(tasks)
        raise RuntimeError("not run")

    monkeypatch.setattr(checked_in_tasks, "run_tasks", tasks_run)
    with pytest.raises(RuntimeError, match="not run"):
        checked_in_tasks.check_paths(["a.mlir", "b.mlir"], settings,
                                     checked_in_tasks.Spread(ExecutorChoice("local", 2)))
    argv = list(seen[0].argv)
    given = argv[argv.index("--resolved-target") + 1]
    assert target_of_text(given) == settings.target and json.loads(given)["label"] == "cpu (virtual devices)"
    child = settings_from_args(build_parser().parse_args(argv))
    assert child.target == settings.target
    resolutions.clear()
    resolved, _ = run_target.resolve_run_target(child)
    assert resolutions == [] and resolved.target is child.target and target_text(resolved.target) == given
