"""The ``jax-shard-lint`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from ...reports.registry import TERMINAL, format_help, formats
from .. import __version__
from ..commands.run.process_counts import process_counts
from ..errors import ShardLintInputError
from ..exit_codes import EXIT_BROKEN_PIPE, EXIT_INPUT, EXIT_INTERNAL
from ..platforms.gpu_targets import PLATFORMS
from ..supervision.supervisor import DEFAULT_TIMEOUT_S, RUN_ANALYSIS_MARGIN_S, in_process, supervise
from .early_checks import OneLineParser, check_inputs_exist, check_timeout
from .emit import stop_progress
from .rule_args import add_rule_args


def _add_common_compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="lint only this target (repeatable); default: all the script returns")
    p.add_argument("--devices", type=int, default=None, metavar="N",
                   help="number of virtual CPU devices (default 8, or devices= in the config)")
    p.add_argument("--platform", choices=PLATFORMS, default=None,
                   help="cpu: virtual CPU devices (default); gpu: the GPUs JAX sees; h100, h200, b200, a100-80g, "
                   "a100-40g: compile for that GPU without one (needs jax-shard-lint[gpu]); tpu-v4, tpu-v5e, "
                   "tpu-v5p, tpu-v6e: compile for that TPU without one (needs jax-shard-lint[tpu])")
    p.add_argument("--topology", metavar="GRID",
                   help="for a TPU target: the slice, e.g. 2x4 (v5e, v6e) or 4x4x4 (v4, v5p); its device count "
                   "and hosts are the slice's (default: the most square grid of --devices)")
    p.add_argument("--target-config", metavar="FILE",
                   help="your own GpuTargetConfigProto text for a GPU platform (instead of the bundled spec)")
    p.add_argument("--hosts", type=int, default=None, metavar="N",
                   help="for a GPU target: spread the devices over N hosts; collectives are then classed as "
                   "within a host or across hosts")
    p.add_argument("--set", dest="params", action="append", default=[], metavar="K=V",
                   help="keyword parameter for shard_lint_targets(), e.g. --set batch=64 (repeatable)")
    p.add_argument("--resolved-target", help=argparse.SUPPRESS)  # an executor child's (platforms/target_wire.py)
    add_rule_args(p)


def _add_cache_args(p: argparse.ArgumentParser) -> None:
    """The analysis cache: every command whose reports come from compiling a target as written."""
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", metavar="DIR",
                       help="keep finished target reports here and reuse them for a program analysed before with "
                       "the same settings and compilers (default: $JAX_SHARD_LINT_CACHE_DIR, else "
                       "~/.cache/jax-shard-lint)")
    cache.add_argument("--no-cache", action="store_true",
                       help="compile every target, and store nothing (also JAX_SHARD_LINT_NO_CACHE=1)")


def _add_executor_args(p: argparse.ArgumentParser, what: str) -> None:
    """Where independent compiles run: this process, N local child processes, or Ray."""
    p.add_argument("--jobs", type=int, default=1, metavar="N", help=f"compile N {what} at once in child "
                   "processes (default 1: one after another in this process); with --executor ray and no "
                   "--ray-address, the CPUs of the Ray runtime started for the run")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help=f"local: this machine (default); ray: one Ray task per {what[:-1]}, on the cluster at "
                   "--ray-address or on a Ray runtime started here (needs jax-shard-lint[ray] here and on the "
                   "workers)")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="the Ray cluster to use, e.g. auto or HOST:6379 (with --executor ray)")


def _add_output_args(p: argparse.ArgumentParser, command: str) -> None:
    """--format (the formats the command renders, from reports/registry.py), -o and -q."""
    p.add_argument("--format", choices=formats(command), default=TERMINAL, help=format_help(command))
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="jax-shard-lint",
        description="Find the collectives, memory peak and sharding mistakes of a JAX program before it runs.",
    )
    parser.add_argument("--version", action="version", version=f"jax-shard-lint {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # --debug works before or after the command; SUPPRESS keeps a subcommand's
    # default from overwriting a --debug given before it.
    debug = OneLineParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show Python tracebacks for errors, and what native code wrote to stderr")
    # Every command but `run`, whose --timeout has always meant the script's limit (its parser takes it below).
    debug_and_timeout = OneLineParser(add_help=False, parents=[debug])
    debug_and_timeout.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                                   help=f"stop after this long and exit 2 (default {DEFAULT_TIMEOUT_S:g}); the command "
                                   "runs in a child process, so a hang or crash in the script or in XLA is one line "
                                   "too")

    lint = sub.add_parser("lint", parents=[debug_and_timeout],
                          help="lower and compile a script's targets and report findings")
    lint.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    _add_common_compile_args(lint)
    _add_output_args(lint, "lint")
    _add_cache_args(lint)
    lint.add_argument("--no-fix-check", action="store_true",
                      help="show fixes without compiling each first (faster; also JAX_SHARD_LINT_NO_FIX_CHECK=1): "
                      "by default every sharding a finding suggests is applied, compiled and compared, and a fix "
                      "that makes the step worse is not offered")
    lint.add_argument("--fail-on", choices=("error", "warning", "never"), default=None,
                      help="exit 1 when a finding reaches this severity (default error)")

    runp = sub.add_parser("run", parents=[debug],
                          help="run an unmodified script as __main__ and lint every program it compiles")
    runp.add_argument("script", help="the script to run")
    runp.add_argument("args", nargs="*", metavar="ARGS", help="arguments for the script: everything after --")
    runp.add_argument("--max-programs", type=int, default=50, metavar="N", help="report at most N programs (50)")
    runp.add_argument("--only", metavar="REGEX", help="only programs whose name matches (e.g. 'train_step')")
    runp.add_argument("--all", action="store_true", help="include single-device programs (eager ops)")
    runp.add_argument("--devices", type=int, default=None, metavar="N",
                      help="give the script N virtual CPU devices (sets XLA's host device count)")
    runp.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="stop the script after this long and report what it compiled (the analysis after it "
                      f"gets {RUN_ANALYSIS_MARGIN_S:g} s more; default: {DEFAULT_TIMEOUT_S:g} s in all)")
    runp.add_argument("--processes", type=int, default=None, metavar="N",
                      help="run the script as 1, 2, 4, ... N local JAX processes on CPU (a local coordinator, Gloo "
                      "collectives), each with its share of --devices (default N), side by side; what grows with "
                      "the process count is a finding at your line (--timeout applies to each run)")
    runp.add_argument("--from-dump", action="store_true",
                      help="TPU programs: memory from the dump alone, without compiling the dumped module again "
                      "(faster; the dump leaves out the compiler's scratch area)")
    add_rule_args(runp)
    runp.add_argument("--fail-on", choices=("error", "warning", "never"), default=None)
    runp.add_argument("--no-fix-check", action="store_true", help="show fixes without compiling each first (lint's)")
    _add_output_args(runp, "run")

    fitp = sub.add_parser("fit", parents=[debug_and_timeout],
                          help="find the largest value of a parameter whose per-device peak fits the budget")
    fitp.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    fitp.add_argument("--param", required=True, metavar="NAME", help="the shard_lint_targets parameter to size")
    fitp.add_argument("--multiple-of", type=int, default=1, metavar="K",
                      help="only values that are multiples of K (e.g. the data axis size)")
    fitp.add_argument("--range", default="1:65536", metavar="LO:HI", help="values to consider (default 1:65536)")
    _add_common_compile_args(fitp)
    _add_output_args(fitp, "fit")
    _add_cache_args(fitp)

    swp = sub.add_parser("sweep", parents=[debug_and_timeout],
                         help="compile a script's targets for several meshes or parameter values and rank them by "
                         "estimated step time among those that fit the budget")
    swp.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    swp.add_argument("--mesh", action="append", default=[], metavar="SHAPE",
                     help="a mesh shape to try, e.g. 4x2, passed to shard_lint_targets as mesh_shape=(4, 2) "
                     "(repeatable)")
    swp.add_argument("--mesh-param", default="mesh_shape", metavar="NAME",
                     help="the shard_lint_targets parameter --mesh sets (default mesh_shape)")
    swp.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                     help="a parameter to vary, e.g. --grid batch=16,32 (repeatable; every combination runs)")
    _add_executor_args(swp, "candidates")
    _add_common_compile_args(swp)
    _add_output_args(swp, "sweep")
    _add_cache_args(swp)

    prop = sub.add_parser("propagate", parents=[debug_and_timeout],
                          help="propagate shardings over StableHLO: values, provenance, predicted communication")
    prop.add_argument("script", metavar="SCRIPT|FILE.mlir",
                      help="a script (as for lint) or a StableHLO .mlir file")
    _add_common_compile_args(prop)
    _add_output_args(prop, "propagate")
    prop.add_argument("--explain", action="append", default=[], metavar="VALUE",
                      help="show how VALUE got its sharding: an SSA name (%%3), a source FILE:LINE, or an input or "
                      "output pytree path (state['w'], result[0])")
    prop.add_argument("--no-compile", action="store_true",
                      help="do not compile to match predicted communication against XLA's")
    prop.add_argument("--all-values", action="store_true",
                      help="list every value (default: the 200 largest; --explain adds the ones it names)")

    rw = sub.add_parser("rewrite", parents=[debug_and_timeout],
                        help="pin output shardings in the StableHLO, recompile, compare, and optionally run both")
    rw.add_argument("script", metavar="SCRIPT|FILE.mlir", help="a script (as for lint) or a StableHLO .mlir file")
    _add_common_compile_args(rw)
    _add_output_args(rw, "rewrite")
    rw.add_argument("--out", action="append", default=[], metavar="PATH=SPEC",
                    help="pin an output: PATH is its pytree path or index, SPEC a PartitionSpec, e.g. "
                    "--out \"result[0]['w']=P('data', 'model')\" (repeatable)")
    rw.add_argument("--from-inputs", action="store_true",
                    help="pin every state output to the sharding of the input it corresponds to (the default "
                    "when no --out is given)")
    rw.add_argument("--validate", action="store_true",
                    help="run both versions on the devices at hand and compare outputs, shardings and time")
    rw.add_argument("--repeats", type=int, default=10, metavar="N", help="timed runs per version (default 10)")

    sg = sub.add_parser("suggest", parents=[debug_and_timeout],
                        help="choose argument and result shardings by solving an ILP under the memory budget, "
                        "compile them beside the written ones and baselines, and print the in/out_shardings text")
    sg.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    _add_common_compile_args(sg)
    _add_output_args(sg, "suggest")
    _add_cache_args(sg)
    _add_executor_args(sg, "versions")
    sg.add_argument("--axes", default=None, metavar="A,B",
                    help="the mesh axes the solver may shard over (default: every axis larger than 1)")
    sg.add_argument("--fix", action="append", default=[], metavar="PATH[=SPEC]",
                    help="keep an argument (or every argument under a pytree path) as written, or at SPEC, e.g. "
                    "--fix tokens or --fix \"params['embed']=P(None, 'tp')\" (repeatable)")
    sg.add_argument("--solver", choices=("auto", "ilp", "local"), default="auto",
                    help="ilp (HiGHS), local (a local search), or auto: the ILP up to 300,000 variables")
    sg.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                    help="deprecated, does nothing (warns): a node count, not a clock, bounds each solve")

    snap = sub.add_parser("snapshot", parents=[debug_and_timeout],
                          help="write each target's StableHLO, metadata and a baseline into a directory")
    snap.add_argument("script", help="SCRIPT.py, SCRIPT.py:function or package.module:function")
    _add_common_compile_args(snap)
    _add_cache_args(snap)
    snap.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write the snapshot to")
    snap.add_argument("-q", "--quiet", action="store_true", help="no summary line")

    chk = sub.add_parser("check", parents=[debug_and_timeout],
                         help="analyse checked-in programs (.mlir, XLA dumps, compiled HLO, jax.export) without "
                         "running Python from them")
    chk.add_argument("paths", nargs="+", metavar="PATH",
                     help="StableHLO .mlir, *after_optimizations*.txt or .hlo, an XLA dump directory, or a "
                     "jax.export artifact")
    _add_common_compile_args(chk)
    _add_output_args(chk, "check")
    _add_cache_args(chk)
    _add_executor_args(chk, "paths")
    chk.add_argument("--fail-on", choices=("error", "warning", "never"), default=None)
    chk.add_argument("--no-fix-check", action="store_true",
                     help="show fixes without compiling each first: by default a StableHLO program's (a snapshot's "
                     ".mlir, a jax.export) suggested shardings are applied, compiled and compared as lint does; a "
                     "compiled HLO's fixes cannot be applied and are shown unchecked")

    gt = sub.add_parser("gate", parents=[debug_and_timeout],
                        help="compare the current analysis with a baseline and fail on regressions")
    gt.add_argument("paths", nargs="*", metavar="SCRIPT|PATH",
                    help="a script, or fixture paths; default: the .mlir snapshots beside the baseline")
    gt.add_argument("--baseline", required=True, metavar="FILE|DIR", help="baseline.json or the snapshot directory")
    gt.add_argument("--update", action="store_true", help="rewrite the baseline from the current analysis")
    gt.add_argument("--rebaseline-on-compiler-change", action="store_true",
                    help="when the baseline was compiled by other jax/jaxlib/libtpu/CUDA-plugin releases, rewrite it "
                         "from this run and pass (the verdict says so) instead of comparing across compilers")
    gt.add_argument("--max-peak-increase", default=None, metavar="PCT", help="default 2%%")
    gt.add_argument("--max-collective-increase", default=None, metavar="PCT", help="default 5%%")
    gt.add_argument("--max-time-increase", default=None, metavar="PCT",
                    help="estimated step time (same device model as the baseline's); default 5%%")
    gt.add_argument("--new-collective-bytes", default=None, metavar="SIZE",
                    help="smallest new all-gather or all-to-all (bytes per step) that fails the gate; default 1MiB")
    _add_common_compile_args(gt)
    _add_output_args(gt, "gate")
    _add_cache_args(gt)
    _add_executor_args(gt, "snapshots")

    sch = sub.add_parser("schema", parents=[debug_and_timeout], help="print the JSON Schema of a report")
    sch.add_argument("kind", nargs="?", default="lint",
                     choices=("lint", "propagate", "rewrite", "gate", "baseline", "sweep", "suggest", "fit"),
                     help="which report (default lint; check writes the lint report too)")

    rules = sub.add_parser("rules", parents=[debug_and_timeout], help="list the rules")
    rules.add_argument("--format", choices=("terminal", "markdown"), default="terminal",
                       help="a table on the terminal, or the Markdown table docs/rules.md holds")
    rule = sub.add_parser("rule", parents=[debug_and_timeout], help="print a rule's documentation")
    rule.add_argument("code", help="rule code (SL101) or name (replicating-collective)")
    return parser


def check_output_path(args: argparse.Namespace) -> None:
    """``-o`` never overwrites an input (the script, a fixture, a baseline) and a
    report file is never written onto a directory or into a missing one."""
    output = getattr(args, "output", None)
    if not output:
        return
    inputs = []
    if getattr(args, "script", None):
        inputs.append(args.script.split(":")[0] if not os.path.exists(args.script) else args.script)
    inputs += list(getattr(args, "paths", None) or [])
    if getattr(args, "baseline", None):
        inputs.append(args.baseline)
    target = os.path.realpath(output)
    for path in inputs:
        if os.path.exists(path) and os.path.realpath(path) == target:
            raise ShardLintInputError("-o", f"{output} is an input of this run; the report would overwrite it")
    if args.command == "snapshot":
        if os.path.exists(output) and not os.path.isdir(output):
            raise ShardLintInputError("-o", f"{output} is a file, not a directory to write the snapshot to")
        return
    if os.path.isdir(output):
        raise ShardLintInputError("-o", f"{output} is a directory; name a file to write the report to")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise ShardLintInputError("-o", f"the folder {parent} does not exist")


def _parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = build_parser()
    # Everything after the first -- belongs to the script that `run` runs.
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if getattr(args, "command", None) == "run":
        args.args = list(args.args) + passthrough
    return parser, args


def _first_input(args: argparse.Namespace) -> str:
    """The file a crash or a timeout is reported against until the child names one."""
    for value in (getattr(args, "script", None), *(getattr(args, "paths", None) or []),
                  getattr(args, "baseline", None)):
        if value:
            return value
    return args.command


def main(argv: list[str] | None = None) -> int:
    """The console script: parse the arguments here, run the command in a
    supervised child (see supervisor.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, args = _parse(argv)
    if not args.command:
        parser.print_help()
        return EXIT_INPUT
    if in_process():
        return run_command(argv)
    try:
        check_timeout(args)
        check_inputs_exist(args)
    except ShardLintInputError as e:
        print(f"jax-shard-lint: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    if args.command == "run":
        runs = len(process_counts(args.processes)) if args.processes and args.processes > 0 else 1
        limit = (args.timeout * runs + RUN_ANALYSIS_MARGIN_S) if args.timeout else DEFAULT_TIMEOUT_S * runs
    else:
        limit = args.timeout or DEFAULT_TIMEOUT_S
    return supervise(argv, _first_input(args), limit, args.debug)


def run_command(argv: list[str]) -> int:
    """The command itself, in this process (the supervised child, and the tests)."""
    # XLA logs every dump and device at INFO on stderr; keep warnings and errors.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from ..adapter.native_stderr import quiet_native_stderr

    with quiet_native_stderr():
        import jax  # noqa: F401  (loading JAX's plugins is where native code writes to stderr)
    parser, args = _parse(argv)
    if not args.command:
        parser.print_help()
        return EXIT_INPUT
    try:
        return _run_parsed(args)
    finally:
        stop_progress(args)


def _run_parsed(args) -> int:
    try:
        from .dispatch import COMMANDS

        check_timeout(args)
        check_output_path(args)
        return COMMANDS[args.command](args)
    except ShardLintInputError as e:
        if args.debug:
            traceback.print_exc()
        print(f"jax-shard-lint: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`... | head`): nothing more to say, and nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except RecursionError as e:  # a structure nested past Python's stack, in input no reader bounded
        if args.debug:
            traceback.print_exc()
        print(f"jax-shard-lint: error: {_first_input(args)}: nested too deeply to analyse ({e})", file=sys.stderr)
        return EXIT_INPUT
    except Exception as e:  # a bug in jax-shard-lint, not in the input
        if args.debug:
            traceback.print_exc()
        from ...passes.pipelines.pass_manager import failed_pass

        stage = failed_pass(e)
        print(f"jax-shard-lint: internal error{f' in {stage}' if stage else ''}: {type(e).__name__}: {e} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
