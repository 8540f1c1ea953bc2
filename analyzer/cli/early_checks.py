"""What the console script checks before it starts the supervised child (which imports JAX,
about 5 s): the options argparse parses, a --timeout, and that the files named are there."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from ..errors import ShardLintInputError
from ..exit_codes import EXIT_INPUT


class OneLineParser(argparse.ArgumentParser):
    """Bad options are bad input: one line and exit 2, without argparse's usage block
    (13 lines for lint) before it; --help still prints the usage."""

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        command = self.prog.removeprefix("jax-shard-lint").strip()
        hint = f"jax-shard-lint {command} --help" if command else "jax-shard-lint --help"
        if "(choose from" not in message:
            message += f" (options: {hint})"
        self.exit(EXIT_INPUT, f"jax-shard-lint: error: {message}\n")


def check_timeout(args: argparse.Namespace) -> None:
    """A positive, finite number of seconds: nan, inf, 0 and -1 would each disable the limit."""
    import math

    value = getattr(args, "timeout", None)
    if value is not None and not (math.isfinite(value) and 0 < value <= 7 * 24 * 3600):
        raise ShardLintInputError("--timeout", f"must be a positive number of seconds (at most a week), got {value}")


def check_inputs_exist(args: argparse.Namespace) -> None:
    """A script or file that is not there is refused here, in a second, before the
    supervised child imports JAX (about 5 s) to find the same."""
    from ..inputs.scripts import split_spec

    scripts = [getattr(args, "script", None)] if args.command != "gate" else []
    paths = [split_spec(s)[0] for s in scripts if s] + (list(args.paths) if args.command == "check" else [])
    for path in paths:
        # package.module:function is imported, not opened: only what names a file is checked.
        names_a_file = args.command == "check" or os.sep in path or path.endswith((".py", ".mlir", ".hlo", ".txt"))
        if names_a_file and not os.path.exists(path):
            raise ShardLintInputError(path, "no such file")
