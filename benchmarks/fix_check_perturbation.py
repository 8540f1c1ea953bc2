"""Whether one fix-check compile can change what lint prints: lint run in this process with that one compile's
result replaced, every other compile as it comes (read back from a filled analysis cache, so the rest is the
same run), and its output compared with an unperturbed run's (benchmarks/README.md, issue 49).

    python benchmarks/fix_check_perturbation.py none - lint examples/fsdp_tp_train_step.py \\
        --cache-dir CACHE --format json --fail-on never > as_is.json
    python benchmarks/fix_check_perturbation.py nochange KEY lint ... > perturbed.json; cmp as_is.json perturbed.json

Each compile a fix check (or the conflict check) asks for is named on stderr, ``ASKED KEY``: the first 10 hex
digits of the sha1 of its StableHLO without the tool's and its callers' frames (the analysis cache's reading),
so a key is the same from run to run. ``MODE``: ``nochange`` (the program as written's own report: the candidate
measures no change), ``fail`` (XLA refused it), ``as`` with ``KEY=OTHER`` (the report of the program OTHER,
whose text a run with ``DUMP_TEXTS=FOLDER`` wrote to FOLDER/OTHER.mlir, read from the same FOLDER), ``none``.
"""

from __future__ import annotations

import hashlib
import os
import sys

os.environ["JAX_SHARD_LINT_IN_PROCESS"] = "1"


def main(argv: list[str]) -> None:
    mode, target, lint_args = argv[0], argv[1], argv[2:]
    from jax_shard_lint.analyzer.backend import (
        candidate_compile,
        checked_fixes,
        conflict_checks,
        fix_checks,
        layout_fix_checks,
    )
    from jax_shard_lint.analyzer.backend.advice import solver_fixes
    from jax_shard_lint.analyzer.backend.cached_analysis import without_tool_frames
    from jax_shard_lint.analyzer.cli.main import main as cli_main
    from jax_shard_lint.analyzer.commands import lint as lint_command
    from jax_shard_lint.analyzer.errors import ShardLintInputError

    folder = os.environ.get("DUMP_TEXTS")
    own = {}
    real_checked = checked_fixes.checked_fixes

    def checked(report, *args, **kwargs):
        own["report"] = report  # lint's own report: the program as written
        return real_checked(report, *args, **kwargs)

    real = candidate_compile.compiled_candidate

    def perturbed(name, text, *args, **kwargs):
        key = hashlib.sha1(without_tool_frames(text).encode()).hexdigest()[:10]
        print("ASKED", key, file=sys.stderr, flush=True)
        if folder and mode != "as":
            with open(os.path.join(folder, key + ".mlir"), "w") as f:
                f.write(text)
        if mode == "as" and key == target.split("=")[0]:
            with open(os.path.join(folder or ".", target.split("=")[1] + ".mlir")) as f:
                return real(name, f.read(), *args, **kwargs)
        if key == target and mode == "fail":
            raise ShardLintInputError("perturbed", "target failed to compile: perturbed")
        if key == target and mode == "nochange" and "report" in own:
            return own["report"]
        return real(name, text, *args, **kwargs)

    lint_command.checked_fixes = checked
    for module in (fix_checks, layout_fix_checks, conflict_checks, solver_fixes):
        module.compiled_candidate = perturbed
    try:
        cli_main(lint_args)
    except SystemExit:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
