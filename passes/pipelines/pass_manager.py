"""The pass manager: a pipeline is a name and its numbered stages (as Shardy's
``propagation_pipeline`` lists its passes), and each stage runs through
``Pipeline.run``, so that a pass that fails says which it was.

A failure keeps its type and message (a caller that catches ``ShardyRejected``
or ``NoFeasibleSharding`` still does); the pass is added as a note
(``BaseException.add_note``), which the CLI's internal-error line reads back:
``internal error in pass 'rules' (stage 13 of pipeline lint): TypeError: ...``
(torch.fx's pass manager names the failing pass the same way).

The schedule is checked when a pipeline is made, not only labelled: a stage's number is its place in the
pipeline (1, 2, ... in order, so the numbers are consecutive by construction), a name is listed once in a
pipeline, and every name is one of ``STAGES``, where each is declared once with the pass it means: a name
two pipelines share (``entry-signature``, ``rules``) is the same pass in both. A pipeline declares each stage's
preconditions (``reads``: the stages whose results it reads), and a stage that would run before one it reads
is refused: the order is the one the data flows in (tests/passes/pipelines/test_schedule_order.py checks
that the declarations hold every stage's result the pipeline's code hands to another stage). tests/passes/pipelines
checks that the stage numbers the pipelines' docstrings give (``Stage 3: ...``) are the stages they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")

_NOTE = "in pass "


# Every stage name, with the one pass it means in every pipeline that lists it.
STAGES: dict[str, str] = {
    # Over a target's StableHLO module and its compiled program (lint, check, propagate, rewrite, suggest).
    "entry-signature": "the entry function's arguments and results (shapes, shardings, paths) and its mesh, read "
                       "from the module (with their source lines where lint reads them)",
    "hlo-parse": "the compiled program's HLO text parsed",
    "collectives": "the compiled program's collectives, each with its mesh axes, bytes and source line",
    "compiled-collectives": "the compiled program's HLO text parsed and its collectives found, to match "
                            "predictions against",
    "memory": "the compiled program's memory summary (peak, its buffers, against the budget)",
    "refusal": "the compiler's out-of-memory refusal read from its error",
    "state-roundtrips": "the outputs that are inputs coming back (the step's state), with those inputs",
    "per-member-copies": "the memory peak's buffers that are a parameter's per-device shape once per member of a "
                         "vmapped batch, said so",
    "collective-intent": "each collective's intent (a parameter's gather, a gradient's reduction, a reshard)",
    "collective-origin": "each collective's origin: the op that needs it and why it runs",
    "row-parallel-sums": "the partial sums of a row-parallel matmul pair, and a column-parallel matmul's input "
                         "gradient summed in the backward pass, marked as intended",
    "combined-parts": "each value of a combined (tuple) all-reduce traced as a collective of its own",
    "step-time": "the step time estimate and each collective's time (with a device model)",
    "call-site": "the user's line that called the jitted function the module was traced from, and the "
                 "collectives XLA inserts to meet its out_shardings located there",
    "rule-facts": "what the target rules read beyond the signature, collectives and memory: their context",
    "rules": "the target rules over their context, findings grouped by cause and sorted",
    "compiled-program-passes": "each rule's pass over the compiled program with every finding (its traits')",
    "report-notes": "the report's warnings the rules on add (their traits')",
    "out-shardings": "the out_shardings= text that keeps the step's state on its layout",
    "provenance": "the propagation behind an explained finding, its predicted communication, and its chain",
    "propagation": "our sharding propagation over the module (flattened call graph, Shardy's rules, graph)",
    "values": "the propagated values with their provenance",
    "predictions": "the communication the propagated layout implies, matched against the compiled collectives",
    "shardy-agreement": "where our propagation and Shardy's own propagation of the module agree",
    "explain": "the provenance lines of the values --explain names",
    # After a rewrite's compile: the two versions compared.
    "program-figures": "one program's peak, collectives and step time, as two versions are compared",
    "collective-changes": "the collectives that appear, go or change size between two programs",
    "remaining-costs": "the resharding a rewrite leaves, each with what would remove it",
    "verdict": "one sentence on whether the rewrite is better",
    # suggest's solve.
    "sharding-rules": "Shardy's op sharding rules on the module, its call graph flattened",
    "sharding-graph": "the sharding graph, the entry's argument tensors and the tensor each result returns",
    "sharding-problem": "the ILP problem over the free axes, the pinned arguments held",
    "solve": "the ILP solved (HiGHS), then improved by local search",
    "propagation-check": "a solution checked against propagation of its pins",
    "model-cost": "the solver's cost model of an assignment, by part",
    "plan-pins": "each plan's argument and result pins",
    "plan-checks": "each plan as solved, as propagated and as compiled",
    "budget-round": "the plan kept, or the argument budget to solve again under",
    "chosen-shardings": "each argument and result with its sharding as written and as chosen",
    # The fix checks the analyzer compiles, in order.
    "parameter-fixes": "the findings' new argument shardings compiled and measured",
    "single-move-rivals": "suggest's other single moves of a parameter whose own fix was measured better, compiled "
                          "and the best by suggest's rule printed",
    "solver-fixes": "suggest's layout tried where a finding's own fix was not measured better",
    "stated-layout-fixes": "the edits of the layouts the program states compiled and measured",
    "loop-weight-gathers": "a loop body's weight gathered where its matmul reads it (SL102), compiled and measured",
    "idle-batch-axes": "the batch on every mesh axis where it leaves one idle (SL105), compiled and measured",
    "unattributed-reshards": "suggest's single moves onto the axes of a collective no argument explains (SL105), "
                             "compiled and measured",
    # Once per run, over what no single target holds.
    "targets": "each target's report, from the analyzer's load, lowering and compile",
    "source-parse": "one file of the program parsed",
    "source-rules": "the source rules over the whole program",
    "process-rules": "the process rules' findings over several processes' runs",
    "suppressions": "the suppression comments read and applied to every finding of the run",
    "unused-suppressions": "a suppression that silences nothing reported",
    "report-rules": "the rules a report documents, at their configured severities",
    # Over finished reports.
    "summarize": "a target's figures as a baseline keeps them",
    "compare": "each target's figures against the baseline's, regressions flagged",
    "compiler-change": "the compiler releases that differ between two compiles",
    "candidates": "each compiled parameter setting as a candidate (or a failed one)",
    "rank": "the candidates ranked by estimated step time among those that fit the budget",
}


class ScheduleError(ValueError):
    """A pipeline whose schedule is not well formed: a stage listed twice, or one ``STAGES`` does not declare."""


@dataclass(frozen=True)
class Pipeline:
    name: str
    stages: tuple[str, ...]
    # Each stage's preconditions: the stages of this pipeline whose results it reads (a stage's postcondition
    # is its result, what STAGES says it makes; what a pipeline is handed from outside is no stage's). Each
    # runs before the stage that reads it: the order is checked against them when the pipeline is made.
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.stages:
            raise ScheduleError(f"pipeline {self.name} has no stage")
        if twice := sorted({s for s in self.stages if self.stages.count(s) > 1}):
            raise ScheduleError(f"pipeline {self.name} lists {', '.join(twice)} more than once: a stage is one "
                                "place in the schedule")
        if undeclared := [s for s in self.stages if s not in STAGES]:
            raise ScheduleError(f"pipeline {self.name}: {', '.join(undeclared)} not declared in STAGES (a stage "
                                "name means one pass in every pipeline)")
        for stage, read in self.reads.items():
            if stage not in self.stages:
                raise ScheduleError(f"pipeline {self.name}: reads of {stage}, which it does not run")
            for earlier in read:
                if earlier not in self.stages:
                    raise ScheduleError(f"pipeline {self.name}: {stage} reads {earlier}, which it does not run")
                if self.number(earlier) >= self.number(stage):
                    raise ScheduleError(f"pipeline {self.name}: {stage} (stage {self.number(stage)}) reads "
                                        f"{earlier}, which runs after it (stage {self.number(earlier)})")

    def number(self, stage: str) -> int:
        """The stage's place in the schedule, from 1."""
        return self.stages.index(stage) + 1

    def where(self, stage: str) -> str:
        """``pass 'rules' (stage 13 of pipeline lint)``."""
        return f"pass {stage!r} (stage {self.number(stage)} of pipeline {self.name})"

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
    """The failing pass an exception was noted with (``pass 'rules' (stage 13 of pipeline lint)``), or None."""
    for note in getattr(e, "__notes__", ()):
        if isinstance(note, str) and note.startswith(_NOTE):
            return note[len(_NOTE):]
    return None
