"""SL001 unused-suppression: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..models.report import Severity, SourceLocation
from ..models.rule_codes import SL001
from .registry import Emitter, define_rule
from .suppressions import Suppression


def unused_suppression(unused: list[tuple[Suppression, str]], out: Emitter) -> None:
    """A suppression comment that suppresses nothing.

    What it does
    ------------
    Reports a `# shard-lint: ignore[CODE]` comment when no finding of that code
    was reported on its line in any target of the run.

    Why is this bad
    ---------------
    A stale suppression hides the next real finding on that line: once the
    problem it was written for is fixed, the comment silently covers whatever
    comes next.

    Example
    -------
    ```python
    y = x @ w  # shard-lint: ignore[SL101]   (the all-gather is gone)
    ```

    Fix
    ---
    Delete the comment, or the code from its list.
    """
    for s, code in unused:
        what = f"ignore[{code}]" if code != "*" else "ignore"
        out.emit(
            f"suppression '# shard-lint: {what}' suppresses nothing",
            SourceLocation(file=s.file, line=s.line),
            fix="remove the comment" if code == "*" or len(s.codes) <= 1 else f"remove {code} from the list",
            subject=f"{s.file}:{s.line}",
        )


RULE = define_rule(SL001, Severity.warning, unused_suppression)
