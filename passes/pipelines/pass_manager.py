"""The pass manager: a pipeline is a name and its numbered stages (as Shardy's
``propagation_pipeline`` lists its passes), and each stage runs through
``Pipeline.run``, so that a pass that fails says which it was.

A failure keeps its type and message (a caller that catches ``ShardyRejected``
or ``NoFeasibleSharding`` still does); the pass is added as a note
(``BaseException.add_note``), which the CLI's internal-error line reads back:
``internal error in pass 'rules' (stage 10 of pipeline lint): TypeError: ...``
(torch.fx's pass manager names the failing pass the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")

_NOTE = "in pass "


@dataclass(frozen=True)
class Pipeline:
    name: str
    stages: tuple[str, ...]

    def where(self, stage: str) -> str:
        """``pass 'rules' (stage 10 of pipeline lint)``."""
        return f"pass {stage!r} (stage {self.stages.index(stage) + 1} of pipeline {self.name})"

    def run(self, stage: str, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """``fn(*args, **kwargs)``, the stage of that name; an exception leaves with the stage noted."""
        if stage not in self.stages:
            raise ValueError(f"pipeline {self.name} has no stage {stage!r} (stages: {', '.join(self.stages)})")
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if failed_pass(e) is None:  # the innermost stage is the one that failed
                e.add_note(_NOTE + self.where(stage))
            raise


def failed_pass(e: BaseException) -> str | None:
    """The failing pass an exception was noted with (``pass 'rules' (stage 10 of pipeline lint)``), or None."""
    for note in getattr(e, "__notes__", ()):
        if isinstance(note, str) and note.startswith(_NOTE):
            return note[len(_NOTE):]
    return None
