"""What each ``jax-shard-lint`` command does once its arguments are parsed:
settings from the arguments and the config file, the work, and the output."""

from __future__ import annotations

import math
import os
import sys

from ..errors import ShardLintInputError
from ..exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_SCRIPT_FAILED
from ..supervision.terminal_size import console_for
from .emit import emit_report, progress_printer
from .settings import settings_from_args


def cmd_lint(args) -> int:
    from ..commands.lint import LintRequest, lint

    settings = settings_from_args(args)
    report = lint(LintRequest(args.script, tuple(args.target), tuple(args.params)), settings, progress_printer(args))
    _say_cache_use(args, settings)
    emit_report(args, "lint", report)
    return exit_code(report, settings.fail_on)


def _say_cache_use(args, settings) -> None:
    """On a terminal: how many targets came from the analysis cache."""
    from ..backend.cached_analysis import analysis_cache

    say, cache = progress_printer(args), analysis_cache(settings)
    if say is None or cache is None:
        return
    stats = cache.stats()
    if stats.hits or stats.misses:
        say(f"analysis cache {settings.cache_dir}: {stats.hits} target(s) reused, {stats.misses} compiled"
            + (f", {stats.corrupt} unreadable entr(ies) rewritten" if stats.corrupt else ""))


def cmd_run(args) -> int:
    from ..commands.run.command import RunRequest, run

    if args.max_programs < 1:
        raise ShardLintInputError("--max-programs", "must be at least 1")
    settings = settings_from_args(args)
    request = RunRequest(args.script, tuple(args.args), args.max_programs, args.only, args.all, args.devices,
                         args.timeout, args.from_dump)
    if args.processes is not None:
        from ..commands.run.processes import run_processes

        report = run_processes(request, args.processes, settings)
    else:
        report = run(request, settings)
    emit_report(args, "run", report)
    return run_exit_code(report, settings.fail_on)


def cmd_fit(args) -> int:
    from ..commands.fit import FitRequest, fit

    lo, sep, hi = args.range.partition(":")
    try:
        lo_v, hi_v = int(lo), int(hi)
    except ValueError:
        raise ShardLintInputError("--range", f"expected LO:HI with integers, got {args.range!r}") from None
    if not sep:
        raise ShardLintInputError("--range", f"expected LO:HI, got {args.range!r}")
    if args.multiple_of < 1:
        raise ShardLintInputError("--multiple-of", f"must be at least 1, got {args.multiple_of}")
    settings = settings_from_args(args)
    result = fit(FitRequest(args.script, args.param, tuple(args.target), tuple(args.params), args.multiple_of,
                            lo_v, hi_v), settings, progress_printer(args))
    emit_report(args, "fit", result)
    return EXIT_OK if result.value is not None else EXIT_FINDINGS


def executor_choice(args):
    """--jobs, --executor and --ray-address, checked."""
    from ..executors.choice import ExecutorChoice

    if args.jobs < 1:
        raise ShardLintInputError("--jobs", f"must be at least 1, got {args.jobs}")
    if args.ray_address and args.executor != "ray":
        raise ShardLintInputError("--ray-address", "needs --executor ray")
    return ExecutorChoice(args.executor, args.jobs, args.ray_address)


def _forwarded_args(args) -> list[str]:
    """The options a child process (a sweep's candidate, a check's path) needs to compile as this one does."""
    out: list[str] = []
    for flag, value in (("--devices", args.devices), ("--platform", args.platform), ("--topology", args.topology),
                        ("--target-config", args.target_config), ("--hosts", args.hosts),
                        ("--budget", args.budget), ("--device", args.device), ("--config", args.config),
                        ("--loop-trips", getattr(args, "loop_trips", None))):
        if value is not None:
            out += [flag, str(value)]
    for t in args.threshold:
        out += ["--threshold", t]
    for code in args.ignore:
        out += ["--ignore", code]
    if args.no_cache:
        out.append("--no-cache")
    elif args.cache_dir is not None:
        out += ["--cache-dir", args.cache_dir]
    return out


def cmd_sweep(args) -> int:
    from ..commands.sweep import SweepRequest, sweep

    executor = executor_choice(args)
    settings = settings_from_args(args)
    run = sweep(SweepRequest(args.script, tuple(args.mesh), tuple(args.grid), tuple(args.params), tuple(args.target),
                             args.mesh_param, executor), settings, _forwarded_args(args), progress_printer(args))
    emit_report(args, "sweep", run)
    return EXIT_OK if any(c.rank for c in run.candidates) else EXIT_FINDINGS


def exit_code(report, fail_on: str) -> int:
    if fail_on == "never":
        return EXIT_OK
    threshold = 2 if fail_on == "error" else 1
    worst = report.worst_severity()
    return EXIT_FINDINGS if worst is not None and worst.rank >= threshold else EXIT_OK


def run_exit_code(report, fail_on: str) -> int:
    """``run``'s exit: 4 when the script failed (whatever the findings: a CI job
    must not pass on a crashed script), else as ``lint``. Its own ``--timeout``
    stopping the script is what the user asked for, not a failure."""
    if report.run is not None and report.run.exit_code != 0 and not report.run.timed_out:
        return EXIT_SCRIPT_FAILED
    return exit_code(report, fail_on)


def cmd_rules(args) -> int:
    from rich.table import Table

    from ...passes.pipelines.catalogue import RULES

    if getattr(args, "format", "terminal") == "markdown":
        from ...passes.pipelines.catalogue import rule_docs
        from ...reports.common.rules_table import rules_markdown

        sys.stdout.write(rules_markdown(rule_docs()))
        return EXIT_OK
    table = Table(title="jax-shard-lint rules")
    for col in ("code", "name", "severity", "summary"):
        table.add_column(col)
    for code in sorted(RULES):
        r = RULES[code]
        table.add_row(r.code, r.name, r.severity.value, r.summary)
    console_for(sys.stdout).print(table)
    return EXIT_OK


def cmd_rule(args) -> int:
    from ...passes.pipelines.catalogue import RULES, find_rule

    r = find_rule(args.code)
    if r is None:
        raise ShardLintInputError(args.code, f"no such rule (known: {', '.join(sorted(RULES))})")
    print(f"{r.code} {r.name} ({r.severity.value})\n")
    print(r.doc)
    if r.options:
        print("\nOptions\n-------")
        for o in r.options:
            print(f"{o.name} (default {_option_text(o)}): {o.help}")
    return EXIT_OK


def _option_text(option) -> str:
    """A default as the config and --threshold take it: 536870912 bytes is ``512MiB``."""
    from ...passes.pipelines.catalogue import OptionKind

    if option.kind is OptionKind.bytes and isinstance(option.default, int) and option.default > 0:
        for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if option.default % size == 0:
                return f"{option.default // size}{unit}"
    return str(option.default)


def cmd_propagate(args) -> int:
    from ...passes.pipelines.propagate import explain_values
    from ..commands.propagate import PropagateRequest, propagate
    from ..context.display_paths import display_source, relativize

    settings = settings_from_args(args)
    run, propagated = propagate(
        PropagateRequest(args.script, tuple(args.target), tuple(args.params), compile=not args.no_compile,
                         all_values=args.all_values), settings,
    )
    explained, targets, unknown = explain_values(run.targets, propagated, args.explain, display_source)
    if unknown is not None:
        raise ShardLintInputError("--explain", f"no value named {unknown!r} (an SSA name like %3, FILE:LINE, or "
                                  "an input or output path)")
    if targets is not None:
        run = relativize(run.model_copy(update={"targets": targets}), os.getcwd())
    emit_report(args, "propagate", run, explained=explained)
    return EXIT_OK


def cmd_rewrite(args) -> int:
    from ..commands.rewrite.command import RewriteRequest, rewrite

    if args.repeats < 1:
        raise ShardLintInputError("--repeats", "must be at least 1")
    settings = settings_from_args(args)
    run = rewrite(RewriteRequest(args.script, tuple(args.target), tuple(args.params), tuple(args.out),
                                 args.from_inputs, args.validate, args.repeats, progress_printer(args)), settings)
    emit_report(args, "rewrite", run)
    failed = any(t.validation and t.validation.ran and not (t.validation.outputs_match and t.validation.shardings_match)
                 for t in run.targets)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_suggest(args) -> int:
    from ..commands.suggest.command import suggest
    from ..commands.suggest.target import SuggestRequest
    from ..executors.checked_in_tasks import Spread

    if args.time_limit is not None:  # deprecated: the solver has no clock limit
        print("jax-shard-lint: warning: --time-limit is deprecated and does nothing: a node count, not a clock, "
              "bounds each solve", file=sys.stderr)
    axes = tuple(a.strip() for a in args.axes.split(",") if a.strip()) if args.axes is not None else ()
    if args.axes is not None and not axes:
        raise ShardLintInputError("--axes", "names no mesh axis")
    executor = executor_choice(args)
    settings = settings_from_args(args)
    spread = Spread(executor, tuple(_forwarded_args(args)), progress_printer(args))
    run = suggest(SuggestRequest(args.script, tuple(args.target), tuple(args.params), axes, tuple(args.fix),
                                 args.solver, spread=spread), settings)
    emit_report(args, "suggest", run)
    return EXIT_OK


def cmd_snapshot(args) -> int:
    from ..commands.gate import SnapshotRequest, snapshot

    settings = settings_from_args(args)
    report = snapshot(SnapshotRequest(args.script, args.output, tuple(args.target), tuple(args.params)), settings)
    if not args.quiet:
        print(f"wrote {len(report.targets)} target(s) and baseline.json to {args.output}")
    return EXIT_OK


def cmd_check(args) -> int:
    from ..commands.gate import check
    from ..executors.checked_in_tasks import Spread

    executor = executor_choice(args)
    settings = settings_from_args(args)
    report = check(list(args.paths), settings,
                   Spread(executor, tuple(_forwarded_args(args)), progress_printer(args)))
    _say_cache_use(args, settings)
    emit_report(args, "check", report)
    return exit_code(report, settings.fail_on)


def _percent(text: str | None, default: float, where: str) -> float:
    if text is None:
        return default
    try:
        value = float(str(text).strip().rstrip("%")) / 100
    except ValueError:
        raise ShardLintInputError(where, f"expected a percentage like 5%, got {text!r}") from None
    if not math.isfinite(value):  # nan would make the check impossible to fail
        raise ShardLintInputError(where, f"expected a finite percentage like 5%, got {text!r}")
    if value < 0:
        raise ShardLintInputError(where, "must not be negative")
    return value


def cmd_gate(args) -> int:
    from ...passes.common.byte_sizes import parse_bytes
    from ...passes.models.gate import GateThresholds
    from ..commands.gate import GateRequest, gate
    from ..executors.checked_in_tasks import Spread

    executor = executor_choice(args)
    settings = settings_from_args(args)
    defaults = GateThresholds()
    try:
        new_bytes = (parse_bytes(args.new_collective_bytes) if args.new_collective_bytes
                     else defaults.new_collective_bytes)
    except ValueError as e:
        raise ShardLintInputError("--new-collective-bytes", str(e)) from None
    thresholds = GateThresholds(
        peak_increase=_percent(args.max_peak_increase, defaults.peak_increase, "--max-peak-increase"),
        collective_increase=_percent(args.max_collective_increase, defaults.collective_increase,
                                     "--max-collective-increase"),
        new_collective_bytes=new_bytes,
        time_increase=_percent(args.max_time_increase, defaults.time_increase, "--max-time-increase"),
    )
    result, _ = gate(GateRequest(args.baseline, tuple(args.paths), tuple(args.params), args.update, tuple(args.target),
                                 platform_given=args.platform is not None,
                                 rebaseline_on_compiler_change=args.rebaseline_on_compiler_change,
                                 spread=Spread(executor, tuple(_forwarded_args(args)), progress_printer(args))),
                     settings, thresholds)
    _say_cache_use(args, settings)
    emit_report(args, "gate", result)
    if args.update:
        return EXIT_OK
    return EXIT_OK if result.passed else EXIT_FINDINGS


def cmd_schema(args) -> int:
    import json

    from ...passes.models.gate import Baseline, GateResult
    from ...passes.models.propagation import PropagateRun
    from ...passes.models.report import LintReport
    from ...passes.models.rewrite import RewriteRun
    from ...passes.models.suggest import SuggestRun
    from ...passes.models.sweep import SweepRun
    from ..commands.fit import FitResult

    model = {"lint": LintReport, "propagate": PropagateRun, "rewrite": RewriteRun, "gate": GateResult,
             "baseline": Baseline, "sweep": SweepRun, "suggest": SuggestRun, "fit": FitResult}[args.kind]
    print(json.dumps(model.model_json_schema(), indent=2, sort_keys=True))
    return EXIT_OK


COMMANDS = {
    "lint": cmd_lint, "run": cmd_run, "fit": cmd_fit, "propagate": cmd_propagate, "rewrite": cmd_rewrite,
    "sweep": cmd_sweep, "snapshot": cmd_snapshot, "check": cmd_check, "gate": cmd_gate, "schema": cmd_schema,
    "rules": cmd_rules, "rule": cmd_rule, "suggest": cmd_suggest,
}
