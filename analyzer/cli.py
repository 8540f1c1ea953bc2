"""The ``jax-shard-lint`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from . import __version__
from .errors import ShardLintInputError

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def _add_common_compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="lint only this target (repeatable); default: all the script returns")
    p.add_argument("--devices", type=int, default=None, metavar="N",
                   help="number of virtual CPU devices (default 8, or devices= in the config)")
    p.add_argument("--platform", choices=("cpu", "gpu", "h100", "h200", "b200", "a100-80g", "a100-40g"), default=None,
                   help="cpu: virtual CPU devices (default); gpu: the GPUs JAX sees; h100, h200, b200, a100-80g, "
                   "a100-40g: compile for that GPU without one (needs jax-shard-lint[gpu])")
    p.add_argument("--target-config", metavar="FILE",
                   help="your own GpuTargetConfigProto text for a GPU platform (instead of the bundled spec)")
    p.add_argument("--hosts", type=int, default=None, metavar="N",
                   help="for a GPU target: spread the devices over N hosts; collectives are then classed as "
                   "within a host or across hosts")
    p.add_argument("--set", dest="params", action="append", default=[], metavar="K=V",
                   help="keyword parameter for shard_lint_targets(), e.g. --set batch=64 (repeatable)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget", metavar="SIZE", help="per-device memory budget, e.g. 80GiB")
    budget.add_argument("--device", metavar="KIND",
                        help="budget from a device preset: h100, h200, b200, a100-80g, a100-40g, tpu-v4, tpu-v5e, "
                        "tpu-v5p, tpu-v6e")
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="override a rule threshold, e.g. --threshold replicating-collective-bytes=128MiB")
    p.add_argument("--ignore", action="append", default=[], metavar="CODE", help="disable a rule (repeatable)")
    p.add_argument("--config", metavar="PYPROJECT",
                   help="read [tool.jax-shard-lint] from this file (default: the nearest pyproject.toml "
                   "above the script)")


def _add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("terminal", "json", "html", "sarif", "markdown"), default="terminal",
                   help="terminal (default), json, html (one self-contained file; use with -o), sarif (2.1.0, for "
                   "code scanning) or markdown (a pull-request comment)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jax-shard-lint",
        description="Find the collectives, memory peak and sharding mistakes of a JAX program before it runs.",
    )
    parser.add_argument("--version", action="version", version=f"jax-shard-lint {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # --debug works before or after the command; SUPPRESS keeps a subcommand's
    # default from overwriting a --debug given before it.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show Python tracebacks for errors")

    lint = sub.add_parser("lint", parents=[debug], help="lower and compile a script's targets and report findings")
    lint.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    _add_common_compile_args(lint)
    _add_output_args(lint)
    lint.add_argument("--fail-on", choices=("error", "warning", "never"), default=None,
                      help="exit 1 when a finding reaches this severity (default error)")

    runp = sub.add_parser("run", parents=[debug],
                          help="run an unmodified script as __main__ and lint every program it compiles")
    runp.add_argument("script", help="the script to run")
    runp.add_argument("args", nargs="*", metavar="ARGS",
                      help="arguments for the script: everything after --")
    runp.add_argument("--max-programs", type=int, default=50, metavar="N", help="report at most N programs (50)")
    runp.add_argument("--only", metavar="REGEX", help="only programs whose name matches (e.g. 'train_step')")
    runp.add_argument("--all", action="store_true", help="include single-device programs (eager ops)")
    runp.add_argument("--devices", type=int, default=None, metavar="N",
                      help="give the script N virtual CPU devices (sets XLA's host device count)")
    runp.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="stop the script after this long")
    runp.add_argument("--budget", metavar="SIZE")
    runp.add_argument("--device", metavar="KIND")
    runp.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE")
    runp.add_argument("--ignore", action="append", default=[], metavar="CODE")
    runp.add_argument("--config", metavar="PYPROJECT")
    runp.add_argument("--fail-on", choices=("error", "warning", "never"), default=None)
    _add_output_args(runp)

    fitp = sub.add_parser("fit", parents=[debug],
                          help="find the largest value of a parameter whose per-device peak fits the budget")
    fitp.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    fitp.add_argument("--param", required=True, metavar="NAME", help="the shard_lint_targets parameter to size")
    fitp.add_argument("--multiple-of", type=int, default=1, metavar="K",
                      help="only values that are multiples of K (e.g. the data axis size)")
    fitp.add_argument("--range", default="1:65536", metavar="LO:HI", help="values to consider (default 1:65536)")
    _add_common_compile_args(fitp)
    fitp.add_argument("--format", choices=("terminal", "json"), default="terminal")
    fitp.add_argument("-o", "--output", metavar="FILE")
    fitp.add_argument("-q", "--quiet", action="store_true")

    prop = sub.add_parser("propagate", parents=[debug],
                          help="propagate shardings over StableHLO: values, provenance, predicted communication")
    prop.add_argument("script", metavar="SCRIPT|FILE.mlir",
                      help="a script (as for lint) or a StableHLO .mlir file")
    _add_common_compile_args(prop)
    _add_output_args(prop)
    prop.add_argument("--explain", action="append", default=[], metavar="VALUE",
                      help="show how VALUE got its sharding: an SSA name (%%3), a source FILE:LINE, or an input or "
                      "output pytree path (state['w'], result[0])")
    prop.add_argument("--no-compile", action="store_true",
                      help="do not compile to match predicted communication against XLA's")

    rw = sub.add_parser("rewrite", parents=[debug],
                        help="pin output shardings in the StableHLO, recompile, compare, and optionally run both")
    rw.add_argument("script", metavar="SCRIPT|FILE.mlir", help="a script (as for lint) or a StableHLO .mlir file")
    _add_common_compile_args(rw)
    _add_output_args(rw)
    rw.add_argument("--out", action="append", default=[], metavar="PATH=SPEC",
                    help="pin an output: PATH is its pytree path or index, SPEC a PartitionSpec, e.g. "
                    "--out \"result[0]['w']=P('data', 'model')\" (repeatable)")
    rw.add_argument("--from-inputs", action="store_true",
                    help="pin every state output to the sharding of the input it corresponds to (the default "
                    "when no --out is given)")
    rw.add_argument("--validate", action="store_true",
                    help="run both versions on the devices at hand and compare outputs, shardings and time")
    rw.add_argument("--repeats", type=int, default=10, metavar="N", help="timed runs per version (default 10)")

    snap = sub.add_parser("snapshot", parents=[debug],
                          help="write each target's StableHLO, metadata and a baseline into a directory")
    snap.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    _add_common_compile_args(snap)
    snap.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write the snapshot to")
    snap.add_argument("-q", "--quiet", action="store_true", help="no summary line")

    chk = sub.add_parser("check", parents=[debug],
                         help="analyse checked-in programs (.mlir, XLA dumps, compiled HLO, jax.export) without "
                         "running Python from them")
    chk.add_argument("paths", nargs="+", metavar="PATH",
                     help="StableHLO .mlir, *after_optimizations*.txt or .hlo, an XLA dump directory, or a "
                     "jax.export artifact")
    _add_common_compile_args(chk)
    _add_output_args(chk)
    chk.add_argument("--fail-on", choices=("error", "warning", "never"), default=None)

    gt = sub.add_parser("gate", parents=[debug],
                        help="compare the current analysis with a baseline and fail on regressions")
    gt.add_argument("paths", nargs="*", metavar="SCRIPT|PATH",
                    help="a script, or fixture paths; default: the .mlir snapshots beside the baseline")
    gt.add_argument("--baseline", required=True, metavar="FILE|DIR", help="baseline.json or the snapshot directory")
    gt.add_argument("--update", action="store_true", help="rewrite the baseline from the current analysis")
    gt.add_argument("--max-peak-increase", default=None, metavar="PCT", help="default 2%%")
    gt.add_argument("--max-collective-increase", default=None, metavar="PCT", help="default 5%%")
    gt.add_argument("--new-collective-bytes", default=None, metavar="SIZE",
                    help="smallest new all-gather or all-to-all (bytes per step) that fails the gate; default 1MiB")
    _add_common_compile_args(gt)
    gt.add_argument("--format", choices=("terminal", "markdown", "json"), default="terminal")
    gt.add_argument("-o", "--output", metavar="FILE", help="write the comparison to FILE instead of stdout")
    gt.add_argument("-q", "--quiet", action="store_true")

    sch = sub.add_parser("schema", parents=[debug], help="print the JSON Schema of a report")
    sch.add_argument("kind", nargs="?", default="lint", choices=("lint", "propagate", "rewrite", "gate", "baseline"),
                     help="which report (default lint; check writes the lint report too)")

    sub.add_parser("rules", parents=[debug], help="list the rules")
    rule = sub.add_parser("rule", parents=[debug], help="print a rule's documentation")
    rule.add_argument("code", help="rule code (SL101) or name (replicating-collective)")
    return parser


def _settings(args: argparse.Namespace):
    from .config import (
        Settings, device_budget, find_pyproject, load_file_settings, parse_budget, parse_option, rule_codes,
    )

    settings = Settings()
    script_path = args.script.split(":")[0] if getattr(args, "script", None) else "."
    config_path = args.config or find_pyproject(script_path if os.path.exists(script_path) else os.getcwd())
    if args.config and not os.path.isfile(args.config):
        raise ShardLintInputError(args.config, "no such file")
    if config_path:
        load_file_settings(settings, config_path)
    if args.devices is not None:
        if args.devices < 1:
            raise ShardLintInputError("--devices", "must be at least 1")
        settings.devices = args.devices
    if args.platform:
        settings.platform = args.platform
    if args.target_config:
        settings.target_config = args.target_config
    if args.hosts is not None:
        if args.hosts < 1:
            raise ShardLintInputError("--hosts", "must be at least 1")
        settings.hosts = args.hosts
    from .gpu_targets import GPU_TARGETS

    if settings.hosts > 1 and settings.platform not in GPU_TARGETS:
        raise ShardLintInputError("--hosts", f"needs a GPU target platform ({', '.join(GPU_TARGETS)})")
    if args.budget:
        settings.budget_bytes, settings.budget_source = parse_budget(args.budget, "--budget"), "--budget"
    if args.device:
        settings.budget_bytes, settings.budget_source = device_budget(args.device, "--device"), args.device
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
    from rich.console import Console

    out = stream or sys.stdout
    return Console(file=out, no_color=not out.isatty() or bool(os.environ.get("NO_COLOR")), width=None
                   if out.isatty() else 120, highlight=False)


def _emit(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def cmd_lint(args) -> int:
    from ..reports.json_report import render_json
    from .lint import LintRequest, lint

    settings = _settings(args)
    err_console = _console(args, sys.stderr)
    # Progress is for people watching a terminal; logs and pipes get the report alone.
    show = not args.quiet and sys.stderr.isatty()
    progress = (lambda msg: err_console.print(f"[dim]{msg}...[/dim]")) if show else None
    report = lint(LintRequest(args.script, tuple(args.target), tuple(args.params)), settings, progress)
    if args.format != "terminal":
        _emit(render_lint_as(report, args.format), args.output)
    else:
        from ..reports.terminal import render_terminal

        if args.output:
            from rich.console import Console

            with open(args.output, "w", encoding="utf-8") as f:
                render_terminal(report, Console(file=f, no_color=True, width=120))
        else:
            render_terminal(report, _console(args))
    return exit_code(report, settings.fail_on)


def cmd_run(args) -> int:
    from .run_capture import RunRequest, run

    for name in ("target", "params", "target_config"):
        setattr(args, name, [] if name != "target_config" else None)
    args.platform, args.hosts = None, None
    script_args = list(args.args)
    if args.max_programs < 1:
        raise ShardLintInputError("--max-programs", "must be at least 1")
    devices = args.devices
    args.devices = None
    settings = _settings(args)
    report = run(RunRequest(args.script, tuple(script_args), args.max_programs, args.only, args.all, devices,
                            args.timeout), settings)
    if args.format != "terminal":
        _emit(render_lint_as(report, args.format), args.output)
    else:
        from ..reports.terminal import render_terminal

        render_terminal(report, _console(args))
    return exit_code(report, settings.fail_on)


def cmd_fit(args) -> int:
    from ..reports.json_report import render_json
    from .fit import FitRequest, fit

    lo, sep, hi = args.range.partition(":")
    try:
        lo_v, hi_v = int(lo), int(hi)
    except ValueError:
        raise ShardLintInputError("--range", f"expected LO:HI with integers, got {args.range!r}") from None
    if not sep:
        raise ShardLintInputError("--range", f"expected LO:HI, got {args.range!r}")
    settings = _settings(args)
    result = fit(FitRequest(args.script, args.param, tuple(args.target), tuple(args.params), args.multiple_of,
                            lo_v, hi_v), settings)
    if args.format == "json":
        _emit(render_json(result), args.output)
    else:
        from ..reports.fit_terminal import render_fit

        render_fit(result, _console(args))
    return EXIT_OK if result.value is not None else EXIT_FINDINGS


def render_lint_as(report, fmt: str) -> str:
    if fmt == "json":
        from ..reports.json_report import render_json

        return render_json(report)
    if fmt == "html":
        from ..reports.html import render_html

        return render_html(report)
    if fmt == "sarif":
        from ..reports.sarif import render_sarif

        return render_sarif(report)
    from ..reports.markdown import render_lint_markdown

    return render_lint_markdown(report)


def exit_code(report, fail_on: str) -> int:
    if fail_on == "never":
        return EXIT_OK
    threshold = 2 if fail_on == "error" else 1
    worst = report.worst_severity()
    return EXIT_FINDINGS if worst is not None and worst.rank >= threshold else EXIT_OK


def cmd_rules(args) -> int:
    from rich.table import Table

    from ..passes.rules import RULES

    table = Table(title="jax-shard-lint rules")
    for col in ("code", "name", "severity", "summary"):
        table.add_column(col)
    for code in sorted(RULES):
        r = RULES[code]
        table.add_row(r.code, r.name, r.severity.value, r.summary)
    _console(args).print(table)
    return EXIT_OK


def cmd_rule(args) -> int:
    from ..passes.rules import RULES, find_rule

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
    from ..passes.propagation_report import explain, find_values
    from ..reports.json_report import render_json
    from .lint import display_source
    from .propagate import PropagateRequest, propagate

    settings = _settings(args)
    run, propagated = propagate(
        PropagateRequest(args.script, tuple(args.target), tuple(args.params), compile=not args.no_compile), settings,
    )
    explained: dict[str, list[str]] = {}
    for query in args.explain:
        lines = []
        for p in propagated:
            for t in find_values(p, query)[:3]:
                lines.extend(explain(p, t, display_source))
        if not lines:
            raise ShardLintInputError("--explain", f"no value named {query!r} (an SSA name like %3, FILE:LINE, or "
                                      "an input or output path)")
        explained[query] = lines
    if args.format == "json":
        _emit(render_json(run), args.output)
    elif args.format == "html":
        from ..reports.html_runs import render_propagation_html

        _emit(render_propagation_html(run), args.output)
    elif args.format == "markdown":
        from ..reports.markdown import render_propagation_markdown

        _emit(render_propagation_markdown(run), args.output)
    elif args.format == "sarif":
        raise ShardLintInputError("--format sarif", "SARIF carries findings: use it with lint or check")
    else:
        from ..reports.propagation_terminal import render_propagation

        render_propagation(run, _console(args), explained)
    return EXIT_OK


def cmd_rewrite(args) -> int:
    from ..reports.json_report import render_json
    from .rewrite import RewriteRequest, rewrite

    if args.repeats < 1:
        raise ShardLintInputError("--repeats", "must be at least 1")
    settings = _settings(args)
    run = rewrite(RewriteRequest(args.script, tuple(args.target), tuple(args.params), tuple(args.out),
                                 args.from_inputs, args.validate, args.repeats), settings)
    if args.format == "json":
        _emit(render_json(run), args.output)
    elif args.format == "html":
        from ..reports.html_runs import render_rewrite_html

        _emit(render_rewrite_html(run), args.output)
    elif args.format == "markdown":
        from ..reports.markdown import render_rewrite_markdown

        _emit(render_rewrite_markdown(run), args.output)
    elif args.format == "sarif":
        raise ShardLintInputError("--format sarif", "SARIF carries findings: use it with lint or check")
    else:
        from ..reports.rewrite_terminal import render_rewrite

        render_rewrite(run, _console(args))
    failed = any(t.validation and t.validation.ran and not (t.validation.outputs_match and t.validation.shardings_match)
                 for t in run.targets)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_snapshot(args) -> int:
    from .gate import SnapshotRequest, snapshot

    settings = _settings(args)
    report = snapshot(SnapshotRequest(args.script, args.output, tuple(args.target), tuple(args.params)), settings)
    if not args.quiet:
        print(f"wrote {len(report.targets)} target(s) and baseline.json to {args.output}")
    return EXIT_OK


def cmd_check(args) -> int:
    from ..reports.json_report import render_json
    from .gate import check

    settings = _settings(args)
    report = check(list(args.paths), settings)
    if args.format != "terminal":
        _emit(render_lint_as(report, args.format), args.output)
    else:
        from ..reports.terminal import render_terminal

        render_terminal(report, _console(args))
    return exit_code(report, settings.fail_on)


def _percent(text: str | None, default: float, where: str) -> float:
    if text is None:
        return default
    try:
        value = float(str(text).strip().rstrip("%")) / 100
    except ValueError:
        raise ShardLintInputError(where, f"expected a percentage like 5%, got {text!r}") from None
    if value < 0:
        raise ShardLintInputError(where, "must not be negative")
    return value


def cmd_gate(args) -> int:
    from ..passes.byte_sizes import parse_bytes
    from ..passes.gate import GateThresholds
    from ..reports.json_report import render_json
    from .gate import GateRequest, gate

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
    )
    result, _ = gate(GateRequest(args.baseline, tuple(args.paths), tuple(args.params), args.update), settings,
                     thresholds)
    if args.format == "json":
        _emit(render_json(result), args.output)
    elif args.format == "markdown":
        from ..reports.markdown import render_gate_markdown

        _emit(render_gate_markdown(result), args.output)
    else:
        from ..reports.gate_terminal import render_gate

        render_gate(result, _console(args))
    if args.update:
        return EXIT_OK
    return EXIT_OK if result.passed else EXIT_FINDINGS


def cmd_schema(args) -> int:
    import json

    from ..passes.gate import Baseline, GateResult
    from ..passes.models import LintReport, PropagateRun
    from ..passes.rewrite_models import RewriteRun

    model = {"lint": LintReport, "propagate": PropagateRun, "rewrite": RewriteRun, "gate": GateResult,
             "baseline": Baseline}[args.kind]
    print(json.dumps(model.model_json_schema(), indent=2, sort_keys=True))
    return EXIT_OK


COMMANDS = {"schema": cmd_schema, "run": cmd_run, "fit": cmd_fit, "lint": cmd_lint, "propagate": cmd_propagate, "rewrite": cmd_rewrite, "snapshot": cmd_snapshot,
            "check": cmd_check, "gate": cmd_gate, "rules": cmd_rules, "rule": cmd_rule}


def main(argv: list[str] | None = None) -> int:
    # XLA logs every dump and device at INFO on stderr; keep warnings and errors.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from .native_stderr import quiet_native_stderr

    with quiet_native_stderr():
        import jax  # noqa: F401  (loading JAX's plugins is where native code writes to stderr)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first -- belongs to the script that `run` runs.
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parser.parse_args(argv)
    if getattr(args, "command", None) == "run":
        args.args = list(args.args) + passthrough
    if not args.command:
        parser.print_help()
        return EXIT_INPUT
    try:
        return COMMANDS[args.command](args)
    except ShardLintInputError as e:
        if args.debug:
            traceback.print_exc()
        print(f"jax-shard-lint: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug in jax-shard-lint, not in the input
        if args.debug:
            traceback.print_exc()
        print(f"jax-shard-lint: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
