"""Checked-in programs (StableHLO files, XLA dumps) analysed as independent tasks: one
``jax-shard-lint check PATH`` per path, in a child process or a Ray task, on the platform
and devices the asking run resolved. ``check`` and ``gate`` hand their paths here, and
``suggest`` the versions it compiles (each written to a file of its own). Each child is handed the run's
resolved target whole and resolves nothing again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...passes.models.report import LintReport, TargetReport
from ..context.config import Settings
from ..platforms.target_wire import target_text
from .bundle import make_path_bundle
from .candidates import CandidateOutcome, CandidateTask
from .choice import ExecutorChoice, run_tasks


@dataclass(frozen=True)
class Spread:
    """How several independent programs are analysed: one after another in this process (the
    default), or each in a child process or a Ray task, given the options (budget, thresholds,
    config, cache) a child needs to analyse as this process would."""

    executor: ExecutorChoice = ExecutorChoice()
    forwarded: tuple[str, ...] = ()
    say: Callable[[str], None] | None = None


@dataclass(frozen=True)
class PathResult:
    reports: list[TargetReport]
    # The path's one-line problem (without the path), when it could not be analysed.
    error: str | None


def check_paths(paths: list[str], settings: Settings, spread: Spread, what: str = "analysed",
                figures_only: bool = False) -> list[PathResult]:
    """Each path's targets, or its error, in the paths' order. ``figures_only``: the caller reads the reports'
    figures and XLA's rematerializations (suggest's versions), not their fixes or why chains, which ``check``
    compiles more programs to check: it is told not to."""
    resolved = ["--platform", settings.platform, "--devices", str(settings.devices)] + given_target(settings)
    resolved += ["--no-fix-check"] if figures_only and "--no-fix-check" not in spread.forwarded else []
    forwarded = _without_options(list(spread.forwarded), ("--platform", "--devices")) + resolved
    tasks = [CandidateTask(k, p, ("check", p, "--format", "json", "--fail-on", "never", "-q", *forwarded))
             for k, p in enumerate(paths)]
    say = spread.say or (lambda _msg: None)
    done: list[int] = []

    def on_done(o: CandidateOutcome) -> None:
        done.append(o.index)
        say(f"[{len(done)}/{len(tasks)}] {tasks[o.index].label}: {'failed' if o.error else what} in "
            f"{o.seconds:.1f} s on {o.worker}")

    extra = [settings.config_file or "", settings.target_config or ""]
    ran = run_tasks(spread.executor, tasks, lambda: make_path_bundle(paths, extra), on_done)
    results = []
    for path, outcome in zip(paths, ran.outcomes):
        if outcome.error is not None or outcome.report_json is None:
            results.append(PathResult([], (outcome.error or "no report came back").removeprefix(f"{path}: ")))
        else:
            results.append(PathResult(LintReport.model_validate_json(outcome.report_json).targets, None))
    return results


def given_target(settings: Settings) -> list[str]:
    """The options that hand a child this run's resolved target, whole: it compiles for it, resolving
    nothing again (platforms/target_wire.py)."""
    return ["--resolved-target", target_text(settings.target)] if settings.target is not None else []


def _without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        else:
            out.append(arg)
    return out
