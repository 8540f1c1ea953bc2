"""What each ``jax-shard-lint`` command does once its arguments are parsed:
settings from the arguments and the config file, the work, and the output."""

from __future__ import annotations

import argparse
import math
import os
import sys

from ..errors import ShardLintInputError

from ..exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_SCRIPT_FAILED


def _settings(args: argparse.Namespace):
    from ..context.config import (
        Settings, device_budget, find_pyproject, load_file_settings, parse_budget, parse_option, rule_codes,
    )

    settings = Settings()
    script_path = args.script.split(":")[0] if getattr(args, "script", None) else "."
    config_path = args.config or find_pyproject(script_path if os.path.exists(script_path) else os.getcwd())
    if args.config and not os.path.isfile(args.config):
        raise ShardLintInputError(args.config, "no such file")
    if config_path:
        load_file_settings(settings, config_path)
    if os.path.isfile(script_path):
        # The script's folder is the user's code (helper modules beside it included).
        settings.user_roots.append(os.path.dirname(os.path.abspath(script_path)))
    if getattr(args, "devices", None) is not None:
        from ..inputs.limits import MAX_DEVICES

        if args.devices < 1:
            raise ShardLintInputError("--devices", "must be at least 1")
        if args.devices > MAX_DEVICES:
            raise ShardLintInputError("--devices", f"at most {MAX_DEVICES} virtual devices, got {args.devices}")
        settings.devices = args.devices
    if getattr(args, "platform", None):
        settings.platform = args.platform
    if getattr(args, "target_config", None):
        settings.target_config = args.target_config
    if getattr(args, "hosts", None) is not None:
        if args.hosts < 1:
            raise ShardLintInputError("--hosts", "must be at least 1")
        settings.hosts = args.hosts
    from ..platforms.gpu_targets import GPU_TARGETS, TPU_TARGETS

    if settings.hosts > 1 and settings.platform not in GPU_TARGETS:
        raise ShardLintInputError("--hosts", f"needs a GPU target platform ({', '.join(GPU_TARGETS)}); a TPU "
                                  "target's hosts come from its --topology")
    if getattr(args, "topology", None):
        settings.topology = args.topology
    if settings.topology and settings.platform not in TPU_TARGETS:
        raise ShardLintInputError("--topology", f"needs a TPU target platform ({', '.join(TPU_TARGETS)})")
    if args.budget is not None:
        settings.budget_bytes, settings.budget_source = parse_budget(args.budget, "--budget"), "--budget"
    if args.device is not None:
        settings.budget_bytes, settings.budget_source = device_budget(args.device, "--device"), args.device
    settings.default_budget()
    for item in args.threshold:
        name, sep, value = item.partition("=")
        if not sep:
            raise ShardLintInputError("--threshold", f"expected NAME=VALUE, got {item!r}")
        settings.options[name.strip()] = parse_option(name.strip(), value.strip(), "--threshold")
    settings.ignore |= rule_codes(args.ignore, "--ignore")
    if getattr(args, "fail_on", None):
        settings.fail_on = args.fail_on
    return settings


def _console(args, stream=None):
    from ..supervision.terminal_size import console_for

    return console_for(stream or sys.stdout)


def _emit(text: str, output: str | None) -> None:
    if output:
        from ..inputs.files import open_output

        with open_output(output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def emit_report(args, report, text_renderers: dict, terminal) -> None:
    """The one way a command's report leaves: ``--format`` picks the renderer,
    ``-o`` the destination (a terminal report written to a file is rendered
    without colour, at the width of a pipe)."""
    if args.format == "terminal":
        from ..supervision.terminal_size import console_for

        if args.output:
            from ..inputs.files import open_output

            with open_output(args.output) as f:
                terminal(report, console_for(f, to_file=True))
        else:
            terminal(report, console_for(sys.stdout))
        return
    render = text_renderers.get(args.format)
    if render is None:  # the parser offers only what the command renders; SARIF carries findings alone
        raise ShardLintInputError(f"--format {args.format}", "SARIF carries findings: use it with lint or check")
    _emit(render(report), args.output)


def _lint_renderers() -> dict:
    from ...reports.html import render_html
    from ...reports.json_report import render_json
    from ...reports.markdown import render_lint_markdown
    from ...reports.sarif import render_sarif

    return {"json": render_json, "html": render_html, "sarif": render_sarif, "markdown": render_lint_markdown}


def _emit_lint(args, report) -> None:
    from ...reports.terminal import render_terminal

    emit_report(args, report, _lint_renderers(), render_terminal)


def _emit_run(args, run, html, markdown, terminal) -> None:
    """The output of a command whose report has no findings to put in SARIF."""
    from ...reports.json_report import render_json

    emit_report(args, run, {"json": render_json, "html": html, "markdown": markdown}, terminal)


def cmd_lint(args) -> int:
    from ..commands.lint import LintRequest, lint

    settings = _settings(args)
    err_console = _console(args, sys.stderr)
    # Progress is for people watching a terminal; logs and pipes get the report alone.
    show = not args.quiet and sys.stderr.isatty()
    progress = (lambda msg: err_console.print(f"[dim]{msg}...[/dim]")) if show else None
    report = lint(LintRequest(args.script, tuple(args.target), tuple(args.params)), settings, progress)
    _emit_lint(args, report)
    return exit_code(report, settings.fail_on)


def cmd_run(args) -> int:
    from ..commands.run import RunRequest, run

    if args.max_programs < 1:
        raise ShardLintInputError("--max-programs", "must be at least 1")
    settings = _settings(args)
    report = run(RunRequest(args.script, tuple(args.args), args.max_programs, args.only, args.all, args.devices,
                            args.timeout), settings)
    _emit_lint(args, report)
    return run_exit_code(report, settings.fail_on)


def cmd_fit(args) -> int:
    from ...reports.json_report import render_json
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
    settings = _settings(args)
    result = fit(FitRequest(args.script, args.param, tuple(args.target), tuple(args.params), args.multiple_of,
                            lo_v, hi_v), settings)
    from ...reports.fit_terminal import render_fit

    emit_report(args, result, {"json": render_json}, render_fit)
    return EXIT_OK if result.value is not None else EXIT_FINDINGS


def _forwarded_args(args) -> list[str]:
    """The options a sweep's child processes need to compile as this one does."""
    out: list[str] = []
    for flag, value in (("--devices", args.devices), ("--platform", args.platform), ("--topology", args.topology),
                        ("--target-config", args.target_config), ("--hosts", args.hosts),
                        ("--budget", args.budget), ("--device", args.device), ("--config", args.config)):
        if value is not None:
            out += [flag, str(value)]
    for t in args.threshold:
        out += ["--threshold", t]
    for code in args.ignore:
        out += ["--ignore", code]
    return out


def cmd_sweep(args) -> int:
    from ..commands.sweep import SweepRequest, sweep

    if args.jobs < 1:
        raise ShardLintInputError("--jobs", f"must be at least 1, got {args.jobs}")
    settings = _settings(args)
    err_console = _console(args, sys.stderr)
    show = not args.quiet and sys.stderr.isatty()
    progress = (lambda msg: err_console.print(f"[dim]{msg}...[/dim]")) if show else None
    run = sweep(SweepRequest(args.script, tuple(args.mesh), tuple(args.grid), tuple(args.params), tuple(args.target),
                             args.jobs, args.mesh_param), settings, _forwarded_args(args), progress)
    from ...reports.sweep_report import render_sweep_html, render_sweep_markdown, render_sweep_terminal

    _emit_run(args, run, render_sweep_html, render_sweep_markdown, render_sweep_terminal)
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

    from ...passes.rules import RULES

    table = Table(title="jax-shard-lint rules")
    for col in ("code", "name", "severity", "summary"):
        table.add_column(col)
    for code in sorted(RULES):
        r = RULES[code]
        table.add_row(r.code, r.name, r.severity.value, r.summary)
    _console(args).print(table)
    return EXIT_OK


def cmd_rule(args) -> int:
    from ...passes.rules import RULES, find_rule

    r = find_rule(args.code)
    if r is None:
        raise ShardLintInputError(args.code, f"no such rule (known: {', '.join(sorted(RULES))})")
    print(f"{r.code} {r.name} ({r.severity.value})\n")
    print(r.doc)
    if r.options:
        print("\nOptions\n-------")
        for o in r.options:
            print(f"{o.name} (default {o.default}): {o.help}")
    return EXIT_OK


def cmd_propagate(args) -> int:
    from ...passes.propagation.report import explain, find_values, with_provenance
    from ..context.display_paths import display_source, relativize
    from ..commands.propagate import PropagateRequest, propagate

    settings = _settings(args)
    run, propagated = propagate(
        PropagateRequest(args.script, tuple(args.target), tuple(args.params), compile=not args.no_compile,
                         all_values=args.all_values), settings,
    )
    explained: dict[str, list[str]] = {}
    named: list[list] = [[] for _ in propagated]
    for query in args.explain:
        lines = []
        for k, p in enumerate(propagated):
            for t in find_values(p, query)[:3]:
                lines.extend(explain(p, t, display_source))
                named[k].append(t)
        if not lines:
            raise ShardLintInputError("--explain", f"no value named {query!r} (an SSA name like %3, FILE:LINE, or "
                                      "an input or output path)")
        explained[query] = lines
    if any(named):
        # The explained values carry their provenance in every format.
        targets = [with_provenance(r, p, ts) if ts else r for r, p, ts in zip(run.targets, propagated, named)]
        run = relativize(run.model_copy(update={"targets": targets}), os.getcwd())
    from ...reports.html_runs import render_propagation_html
    from ...reports.markdown import render_propagation_markdown
    from ...reports.propagation_terminal import render_propagation

    _emit_run(args, run, render_propagation_html, render_propagation_markdown,
              lambda r, console: render_propagation(r, console, explained))
    return EXIT_OK


def cmd_rewrite(args) -> int:
    from ..commands.rewrite import RewriteRequest, rewrite

    if args.repeats < 1:
        raise ShardLintInputError("--repeats", "must be at least 1")
    settings = _settings(args)
    run = rewrite(RewriteRequest(args.script, tuple(args.target), tuple(args.params), tuple(args.out),
                                 args.from_inputs, args.validate, args.repeats), settings)
    from ...reports.html_runs import render_rewrite_html
    from ...reports.markdown import render_rewrite_markdown
    from ...reports.rewrite_terminal import render_rewrite

    _emit_run(args, run, render_rewrite_html, render_rewrite_markdown, render_rewrite)
    failed = any(t.validation and t.validation.ran and not (t.validation.outputs_match and t.validation.shardings_match)
                 for t in run.targets)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_suggest(args) -> int:
    from ..commands.suggest import SuggestRequest, suggest

    if not (args.time_limit > 0 and args.time_limit < float("inf")):
        raise ShardLintInputError("--time-limit", f"must be a positive number of seconds, got {args.time_limit:g}")
    axes = tuple(a.strip() for a in args.axes.split(",") if a.strip()) if args.axes is not None else ()
    if args.axes is not None and not axes:
        raise ShardLintInputError("--axes", "names no mesh axis")
    settings = _settings(args)
    run = suggest(SuggestRequest(args.script, tuple(args.target), tuple(args.params), axes, tuple(args.fix),
                                 args.solver, args.time_limit), settings)
    from ...reports.suggest_report import render_suggest_html, render_suggest_markdown, render_suggest_terminal

    _emit_run(args, run, render_suggest_html, render_suggest_markdown, render_suggest_terminal)
    return EXIT_OK


def cmd_snapshot(args) -> int:
    from ..commands.gate import SnapshotRequest, snapshot

    settings = _settings(args)
    report = snapshot(SnapshotRequest(args.script, args.output, tuple(args.target), tuple(args.params)), settings)
    if not args.quiet:
        print(f"wrote {len(report.targets)} target(s) and baseline.json to {args.output}")
    return EXIT_OK


def cmd_check(args) -> int:
    from ..commands.gate import check

    settings = _settings(args)
    report = check(list(args.paths), settings)
    _emit_lint(args, report)
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
    from ...reports.json_report import render_json
    from ..commands.gate import GateRequest, gate

    settings = _settings(args)
    defaults = GateThresholds()
    try:
        new_bytes = parse_bytes(args.new_collective_bytes) if args.new_collective_bytes else defaults.new_collective_bytes
    except ValueError as e:
        raise ShardLintInputError("--new-collective-bytes", str(e)) from None
    thresholds = GateThresholds(
        peak_increase=_percent(args.max_peak_increase, defaults.peak_increase, "--max-peak-increase"),
        collective_increase=_percent(args.max_collective_increase, defaults.collective_increase,
                                     "--max-collective-increase"),
        new_collective_bytes=new_bytes,
        time_increase=_percent(args.max_time_increase, defaults.time_increase, "--max-time-increase"),
    )
    result, _ = gate(GateRequest(args.baseline, tuple(args.paths), tuple(args.params), args.update,
                                 platform_given=args.platform is not None), settings, thresholds)
    from ...reports.gate_terminal import render_gate
    from ...reports.markdown import render_gate_markdown

    emit_report(args, result, {"json": render_json, "markdown": render_gate_markdown}, render_gate)
    if args.update:
        return EXIT_OK
    return EXIT_OK if result.passed else EXIT_FINDINGS


def cmd_schema(args) -> int:
    import json

    from ...passes.models.gate import Baseline, GateResult
    from ...passes.models.report import LintReport, PropagateRun
    from ...passes.models.rewrite import RewriteRun
    from ...passes.models.suggest import SuggestRun
    from ...passes.models.sweep import SweepRun

    model = {"lint": LintReport, "propagate": PropagateRun, "rewrite": RewriteRun, "gate": GateResult,
             "baseline": Baseline, "sweep": SweepRun, "suggest": SuggestRun}[args.kind]
    print(json.dumps(model.model_json_schema(), indent=2, sort_keys=True))
    return EXIT_OK


COMMANDS = {
    "lint": cmd_lint, "run": cmd_run, "fit": cmd_fit, "propagate": cmd_propagate, "rewrite": cmd_rewrite,
    "sweep": cmd_sweep, "snapshot": cmd_snapshot, "check": cmd_check, "gate": cmd_gate, "schema": cmd_schema,
    "rules": cmd_rules, "rule": cmd_rule, "suggest": cmd_suggest,
}
