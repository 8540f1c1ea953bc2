"""The one error type for bad input. The CLI prints it as one line and exits 2."""

from __future__ import annotations


class ShardLintInputError(Exception):
    """Bad input: names the file (or argument) and the problem."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` for an exception raised by user code."""
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
