"""What a rule is. Each rule file defines ``RULE = define_rule(CODE, severity, check)``;
the check's docstring, with the sections What it does / Why is this bad / Example /
Fix, is the one text behind ``jax-shard-lint rule CODE``, the HTML report and SARIF.
The file also declares the rule's options (``RuleOption`` constants the check reads with
``ctx.option(OPTION)``) and its traits (``RuleTraits``: how its findings are explained and
how its fix is compiled), read from the rule by the stages that act on them.
table.py lists every rule; models/rule_codes.py names them.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from ..models.fix_check import StatedLayoutEdit
from ..models.process_runs import GrowingTransfer
from ..models.report import ArrayType, ConstraintCause, Finding, FixCandidate, Severity, SourceLocation, TensorInfo
from ..models.rule_codes import Code, Scope

DOC_SECTIONS = ("What it does", "Why is this bad", "Example", "Fix")
_CODE = re.compile(r"^SL\d{3}$")
_NAME = re.compile(r"^[a-z]+(-[a-z]+)*$")


class OptionKind(str, Enum):
    """How a threshold is written and checked."""

    bytes = "bytes"  # a size: 512MiB, 4GB or a plain byte count
    fraction = "fraction"  # a share between 0 and 1
    ratio = "ratio"  # a multiple, at least 1
    int = "int"


T = TypeVar("T")


@dataclass(frozen=True)
class RuleOption(Generic[T]):
    """A threshold, declared once in its rule's file and read there by identity (``ctx.option(OPTION)``);
    its name is what the configuration and ``--threshold`` write."""

    name: str
    default: T
    kind: OptionKind
    help: str


class Provenance(Enum):
    """How a rule's findings are explained by sharding propagation (finding_provenance.py)."""

    none = "none"
    # Why the output the finding names (its subject) has its layout: the hops that gave it.
    output_layout = "output-layout"
    # The collective propagation predicts at the finding's line, of the finding's kind, and why.
    predicted_collective = "predicted-collective"
    # As predicted_collective, over the finding's collective's mesh axes only: a finding about one layout
    # change is not explained by a prediction over other axes at the same line.
    predicted_collective_on_axes = "predicted-collective-on-axes"


class FixKind(Enum):
    """What the fix checks (analyzer/backend/fix_checks.py) compile for a finding's fix."""

    # The fix is text (or another check's: the state fix checks of the rules ``about_state``).
    text = "text"
    # A new PartitionSpec for the argument the finding names (its suggested_sharding), compiled and measured.
    parameter = "parameter"
    # A layout the program states, edited in its StableHLO (a constraint's axes moved to a dimension they
    # divide, an output pinned to its input's sharding), compiled and measured (layout_fix_checks.py).
    stated_layout = "stated-layout"
    # The argument the finding names donated (jit's donate_argnums), compiled and measured, outside the sharding
    # fixes' budget.
    donation = "donation"


@dataclass(frozen=True)
class RuleTraits:
    """What other stages do with a rule's findings, declared in the rule's file."""

    provenance: Provenance = Provenance.none
    fix: FixKind = FixKind.text
    # With FixKind.stated_layout: which edit of the stated layout its candidates are (layout_fix_checks.py
    # builds each kind's). With FixKind.parameter, rule_candidates: a finding whose fix names no sharding for
    # its argument but carries candidates (SL105's gathered activation) has them compiled as a stated layout's.
    layout_edit: StatedLayoutEdit | None = None
    # Its findings are about the layout of the arguments they name: where its own fix was compiled and not
    # measured better, suggest's layout for those arguments is tried (the solver fixes).
    argument_layout: bool = False
    # Its findings are about a step's state (an argument and the output it comes back as): a parameter and
    # the optimizer state mirroring it are one cause (group_by_cause.py), and the state fix checks (pin the
    # outputs, or take the layout they come back in) give its findings one recommendation (fix_checks.py).
    about_state: bool = False
    # Its findings are about the traffic a step moves (collectives no stated layout asked for): a change that
    # lowers the peak alone does not answer it, so it is not printed as the finding's fix
    # (fix_verdicts.for_finding: a new user's GNN, whose SL103 fix moved another weight for 1% of the peak).
    about_traffic: bool = False
    # Where its fix (FixKind.parameter) was compiled and not measured better, the same axes on the argument's last
    # dimension they divide are tried next (a table gathered along its rows keeps its columns sharded), instead
    # of the rule's further candidates.
    other_dimension: bool = False
    # Its findings can stand for the collectives XLA adds where an output leaves the program on another
    # layout; an output-sharding-mismatch finding about that output claims them
    # (sl201_output_sharding_mismatch.claim_output_reshards).
    boundary_collectives: bool = False
    # Its findings are about an output that leaves on another layout than its input came in: what a rewrite
    # pinning the outputs fixes, so those still found after it are among the costs it leaves (rewrite_diff.py).
    about_output_layout: bool = False
    # It reads Shardy's propagation of the module (the values it cuts unevenly), which the lint pipeline
    # runs only when a rule on reads it.
    reads_shardy_propagation: bool = False
    # Its findings name the argument behind a loop body's collectives: where a matmul at the finding's line reads
    # that argument's loop slice, the slice gathered there instead (FSDP's weight gather) is compiled and
    # measured (analyzer/backend/loop_weight_gathers.py), and otherwise the rule's advice says it was not.
    loop_weight_gather: bool = False
    # The collectives its findings explain (their HLO names), from the target's RuleContext: what another rule
    # then leaves out (SL105 reports only the resharding no rule claims). The rules stage gathers every rule's
    # claims, the disabled rules' too (a collective one rule explains is not unexplained because its findings
    # are not shown), into RuleContext.claimed_collectives before any rule runs (rule_stage.rule_context).
    claims: Callable[[Any], Iterable[str]] | None = None
    # Which of its findings stand for a group with nothing to act on unless a state fix is measured better (SL201's
    # many small outputs): where neither is, the fix checks drop it and say so in one line (fix_verdicts.py).
    group_without_own_fix: Callable[[Any], bool] | None = None
    # Its findings stand only where their own fix is measured to do what this says, given the fix's check and the
    # resolved options (SL208: the peak a small argument's gathers cause, which only its compile replicated
    # measures): the fix checks drop one whose fix was compiled and does not, and say so in one line
    # (fix_verdicts.py).
    measured_enough: Callable[[Any, dict[str, Any]], bool] | None = None
    # After every target rule ran: the findings with its own merged (SL201 folds each SL205 about a resharded
    # output into its finding about the same parameter). The rules stage runs each, in code order.
    merge_findings: Callable[[list[Finding]], list[Finding]] | None = None
    # Its pass over the compiled program, after the rules, over every finding: (HLO module, findings,
    # outputs, collectives, the codes whose traits say boundary_collectives) -> findings (SL201 explains its
    # outputs by the resharding they depend on and claims what XLA adds where they leave). lint runs it.
    compiled_program_pass: Callable[..., list[Finding]] | None = None
    # A line for the target report's warnings, from its RuleContext, when the rule is on (SL105: the small
    # reshards no rule reports, said to be left out).
    report_note: Callable[[Any], str | None] | None = None
    # ``run --processes``: its message and fix for a program whose collectives grow with the process count
    # (given whether the program is JAX's check that every process passed the same value), or None where that
    # program is not its to report. The run-wide pipeline asks each rule, in code order.
    process_growth: Callable[[GrowingTransfer, bool], tuple[str, str] | None] | None = None
    # ``run --processes``: its message and fix for a script that runs as one process and fails as several
    # (the process count, the error) fetching an array that spans other processes' devices.
    failed_fetch: Callable[[int, str], tuple[str, str]] | None = None
    # Its findings are XLA's own word that it replicates a value to compile the program (SL104's involuntary
    # full rematerialization): kept on a fix candidate's figures-only report, where a candidate compiled with
    # one the program as written lacks is not better (fix_verdicts.measured_check).
    rematerialization: bool = False


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    doc: str
    options: tuple[RuleOption[Any], ...]
    check: Callable[..., None] = field(repr=False)  # (RuleContext | source facts | unused suppressions, Emitter)
    scope: Scope = Scope.TARGET
    traits: RuleTraits = RuleTraits()

    def section(self, title: str) -> str:
        """The text of one documentation section."""
        m = re.search(rf"^{re.escape(title)}\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", self.doc, re.S | re.M)
        return m.group(1).strip() if m else ""


def define_rule(code: Code, severity: Severity, check: Callable[..., None],
                options: tuple[RuleOption[Any], ...] = (), traits: RuleTraits = RuleTraits()) -> Rule:
    """A rule from its code (models/rule_codes.py), default severity and check function."""
    if not _CODE.match(code.code):
        raise ValueError(f"rule code {code.code!r} must look like SL123")
    if not _NAME.match(code.name):
        raise ValueError(f"rule name {code.name!r} must be kebab-case")
    if (traits.fix is FixKind.stated_layout) != (traits.layout_edit is not None) and not (
            traits.fix is FixKind.parameter and traits.layout_edit is StatedLayoutEdit.rule_candidates):
        raise ValueError(f"rule {code.code}: a stated-layout fix names its layout_edit, and only it (or a parameter's "
                         "fix, rule_candidates: its findings' candidates)")
    doc = inspect.getdoc(check) or ""
    summary = doc.split("\n\n", 1)[0].strip()
    return Rule(code.code, code.name, severity, summary, doc, tuple(options), check, code.scope, traits)


@dataclass
class Emitter:
    """Builds findings for one rule, applying the configured severity."""

    rule: Rule
    severity: Severity
    findings: list[Finding] = field(default_factory=list)

    def emit(
        self, message: str, source: SourceLocation | None, fix: str | None = None, subject: str | None = None,
        via: SourceLocation | None = None, why: list[str] | None = None, parameter: TensorInfo | None = None,
        suggested: list[list[str]] | None = None, total_bytes: int | None = None, count: int = 1,
        ops: list[str] | None = None, constraint: ConstraintCause | None = None,
        candidates: list[FixCandidate] | None = None, split_origin: SourceLocation | None = None,
        rematerialized_value: ArrayType | None = None,
    ) -> None:
        """``parameter``: the argument the finding comes from, ``suggested`` the sharding its fix gives
        it; ``total_bytes``: the per-device bytes per step the finding is about (grouping adds them);
        ``ops``: the HLO ops it stands for, when more than the subject; ``candidates``: the layouts its fix
        check compiles, where the rule derives them; ``split_origin``, ``rematerialized_value``: what the
        analyzer's fix checks read of SL105's split and SL104's value (Finding's fields of those names)."""
        self.findings.append(Finding(
            rule=self.rule.code, name=self.rule.name, severity=self.severity,
            message=message, source=source, via=via, fix=fix, subject=subject, provenance=list(why or []),
            parameter=parameter.path if parameter is not None else None,
            parameter_sharding=parameter.sharding if parameter is not None else None,
            suggested_sharding=suggested, bytes=total_bytes, count=count, ops=list(ops or []),
            constraint=constraint, candidates=list(candidates or []), split_origin=split_origin,
            rematerialized_value=rematerialized_value,
        ))
