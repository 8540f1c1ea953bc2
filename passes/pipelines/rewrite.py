"""The rewrite pipeline: ``REWRITE``'s stages, from a target's StableHLO and its report to what pinning
its outputs' shardings changed (``rewrite``, the schedule). The analyzer chooses the pins (the user's, or
the state that comes back on another layout), edits the module (the entry function's result shardings)
and compiles the version after (analyzer/commands/rewrite/command.py), each a callback; the analyses
around those steps are these: the entry signature, the state round trips (an output returning an input's
state: what ``rewrite`` pins when no sharding is given, and where a donation can be lost), each program's
figures, the collectives that changed, the costs left, and the verdict. suggest's versions are measured
by the same figures stage (a version is a rewrite of the program)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from jaxlib.mlir import ir

from ..compare.rewrite_diff import collective_changes, lost_donations, program_facts, remaining_costs, verdict
from ..models.entry import EntrySignature, RoundTrip
from ..models.report import Collective, SourceLocation, TargetReport
from ..models.rewrite import AppliedSharding, CollectiveChange, ProgramFacts
from ..rules.table import codes_where
from .entry import changed_roundtrips, entry_signature, state_roundtrips
from .pass_manager import Pipeline

# The figures and collectives compared are the two versions' lint reports, handed in (no stage's result).
REWRITE = Pipeline("rewrite", ("entry-signature", "state-roundtrips", "program-figures", "collective-changes",
                               "remaining-costs", "verdict"), reads={
    "entry-signature": (), "state-roundtrips": ("entry-signature",), "program-figures": (), "collective-changes": (),
    "remaining-costs": (), "verdict": ("program-figures", "remaining-costs"),
})

# The rules whose findings are about an output's layout (their traits say so): what pinning outputs fixes.
_OUTPUT_LAYOUT_RULES = codes_where(lambda t: t.about_output_layout)


def round_trips(sig: EntrySignature) -> tuple[RoundTrip, ...]:
    """Stage 2: each output that returns an input's state, with that input."""
    return state_roundtrips(sig, REWRITE)


def changed_round_trips(sig: EntrySignature) -> tuple[RoundTrip, ...]:
    """Stage 2: the round trips whose output leaves in another layout than its input came in."""
    return changed_roundtrips(round_trips(sig), REWRITE)


def program_figures(report: TargetReport) -> ProgramFacts:
    """Stage 3: one program's peak, collectives and step time, as the two versions are compared."""
    return REWRITE.run("program-figures", program_facts, report)


def changed_collectives(before: list[Collective], after: list[Collective]) -> list[CollectiveChange]:
    """Stage 4: the collectives that appear, go or change size between the two programs."""
    return REWRITE.run("collective-changes", collective_changes, before, after)


def costs_left(after: TargetReport, display: Callable[[SourceLocation], str] = str) -> list[str]:
    """Stage 5: the resharding the rewrite leaves, each with what would remove it."""
    return REWRITE.run("remaining-costs", remaining_costs, after, _OUTPUT_LAYOUT_RULES, display)


def rewrite_verdict(before: ProgramFacts, after: ProgramFacts, remaining: list[str]) -> str:
    """Stage 6: one sentence on whether the rewrite is better."""
    return REWRITE.run("verdict", verdict, before, after, remaining)


NOTHING_TO_REWRITE = "Nothing to rewrite: every output already has the sharding of the input it corresponds to."
# Where no output is an input returned (a solver's result, a loss), no layout pin carries the next step's state.
NO_STATE_RETURNED = "Nothing to rewrite: no output is an input the step returns (state), so no pin keeps a layout " \
    "for the next step."

# The analyzer's steps: which outputs get which sharding, from the signature and the round trips whose
# output leaves on another layout (the user's pins or those); and the program with those outputs pinned,
# compiled and analysed (output index -> sharding).
ChoosePins = Callable[[EntrySignature, tuple[RoundTrip, ...]], list[AppliedSharding]]
CompilePinned = Callable[[EntrySignature, dict[int, list[list[str]]]], TargetReport]


@dataclass(frozen=True)
class Rewritten:
    signature: EntrySignature
    roundtrips: tuple[RoundTrip, ...]  # the program as written's, with its compiled shardings
    applied: list[AppliedSharding]
    after: TargetReport  # ``before`` where nothing was pinned
    figures_before: ProgramFacts
    figures_after: ProgramFacts
    collective_changes: list[CollectiveChange]
    remaining: list[str]
    verdict: str


def rewrite(module: ir.Module, before: TargetReport, choose: ChoosePins, compile_pinned: CompilePinned,
            display: Callable[[SourceLocation], str] = str) -> Rewritten:
    """``REWRITE``'s stages in order, around the analyzer's choice of pins and its compile of the program
    with them (``before``: the program as written, analysed)."""
    sig = entry_signature(module, REWRITE)  # 1
    pairs = round_trips(replace(sig, inputs=tuple(before.inputs), outputs=tuple(before.outputs)))  # 2
    applied = choose(sig, changed_roundtrips(pairs, REWRITE))  # 2
    after = compile_pinned(sig, {a.index: a.after for a in applied}) if applied else before
    figures_before, figures_after = program_figures(before), program_figures(after)  # 3
    changes = changed_collectives(before.collectives, after.collectives)  # 4
    remaining = costs_left(after, display) + REWRITE.run(  # 5
        "remaining-costs", lost_donations, before, after, applied, pairs)
    summary = (rewrite_verdict(figures_before, figures_after, remaining) if applied  # 6
               else NOTHING_TO_REWRITE if pairs else NO_STATE_RETURNED)
    return Rewritten(sig, pairs, applied, after, figures_before, figures_after, changes, remaining, summary)
