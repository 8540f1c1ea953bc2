"""The one error type for bad input. The CLI prints it as one line and exits 2."""

from __future__ import annotations

# A user's exception message quoted in an error line: enough to recognise it.
MAX_MESSAGE_CHARS = 300


class ShardLintInputError(Exception):
    """Bad input: names the file (or argument) and the problem."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` for an exception raised by user code."""
    try:
        text = str(exc).strip().splitlines()
    except BaseException:  # the user's __str__ raised: the type still says something
        text = []
    msg = text[0] if text else ""
    if len(msg) > MAX_MESSAGE_CHARS:
        msg = msg[: MAX_MESSAGE_CHARS - 1] + "…"
    name = type(exc).__name__
    return f"{name}: {msg}" if msg else name
