"""Findings explained by sharding propagation: why an output has its layout,
why a collective at a line is needed. Which rules' findings are explained, and how, is each rule's
``traits.provenance`` (registry.Provenance), declared in its file."""

from __future__ import annotations

from collections.abc import Callable

from ..common.sharding_text import normalized, pspec_text
from ..models.propagation import PredictedCollective
from ..models.report import Finding, SourceLocation, TargetReport
from ..propagation.graph import Tensor, user_label
from ..propagation.predicted_communication import FAMILIES, predict
from ..propagation.report import Propagated, explain, find_values
from .parameter_advice import moved_off
from .registry import FixKind, Provenance
from .reshard_groups import NO_ARGUMENT
from .table import RULES

MAX_LINES = 6

# Whether the finding's collectives change when the argument at this path is given another sharding (the
# analyzer compiles the program with it replicated): its sharding then takes part in them, and a chain from
# it is the other side of the layout conflict. None where nothing is compiled: no such chain is printed.
ConflictCheck = Callable[[TargetReport, Finding, str], bool]


def provenance_of(f: Finding) -> Provenance:
    """How the finding's rule is explained (Provenance.none for a code no rule has)."""
    rule = RULES.get(f.rule)
    return rule.traits.provenance if rule is not None else Provenance.none


def explained(findings: list[Finding]) -> bool:
    """Whether any of the findings is one propagation explains (worth propagating the program for)."""
    return any(provenance_of(f) is not Provenance.none for f in findings)


def _predicted_at(predicted: list[PredictedCollective], f: Finding) -> list[PredictedCollective]:
    if f.source is None:
        return []
    return [p for p in predicted if p.source and p.source.line == f.source.line and p.source.file == f.source.file]


def attach_provenance(
    report: TargetReport, p: Propagated, display: Callable[[SourceLocation], str] = str,
    predicted: list[PredictedCollective] | None = None, meets: ConflictCheck | None = None,
) -> TargetReport:
    """Each explained finding's chain. A collective's chain is the one that begins at the argument the finding
    names; failing that, one that begins at another argument whose sharding ``meets`` finds taking part in the
    collective, labelled as the other side of the conflict (never as its cause)."""
    predicted = predict(p.graph) if predicted is None else predicted
    out = []
    for f in report.findings:
        lines: list[str] = []
        how = provenance_of(f)
        if how is Provenance.output_layout and f.subject:
            for t in find_values(p, f.subject)[:1]:
                lines = _output_chain(report, p, t, f.subject, display)
        elif how in (Provenance.predicted_collective, Provenance.predicted_collective_on_axes):
            kinds = {FAMILIES.get(c.kind, c.kind) for c in report.collectives if c.hlo_name == f.subject}
            # A layout change over given axes (SL105's): a prediction over other axes at the same line
            # explains another collective, not this one.
            axes = ({tuple(c.mesh_axes) for c in report.collectives if c.hlo_name == f.subject}
                    if how is Provenance.predicted_collective_on_axes else None)
            at_line = [pred for pred in _predicted_at(predicted, f)
                       if (axes is None or tuple(pred.mesh_axes) in axes)
                       and (not kinds or FAMILIES.get(pred.kind, pred.kind) in kinds)]
            for pred in at_line:
                value = p.graph.tensors_by_name().get(pred.value)
                # A chain that begins at another argument than the one the finding names explains another
                # value's layout: the next prediction at the line is tried, else the other side below.
                if f.parameter and (value is None or _began_at(p, value) != f"argument {f.parameter}"):
                    continue
                lines.append(f"predicted {pred.kind} over {', '.join(pred.mesh_axes)}: {pred.reason}")
                if value is not None:
                    lines.extend(explain(p, value, display)[1:])
                    f = _named_by_chain(report, f, _began_at(p, value), pred)
                break
            if not lines and f.parameter and meets is not None:
                lines = _other_side(report, p, f, at_line, meets, display)
        if len(lines) > MAX_LINES:
            # The first hops say what is near the finding, the last ones where it began.
            lines = lines[: MAX_LINES - 3] + [f"... {len(lines) - MAX_LINES + 2} more ..."] + lines[-2:]
        # What the compiled program showed (the op that reads along a sharded
        # dimension) first, then how propagation got there.
        lines = list(f.provenance) + [line for line in lines if line not in f.provenance]
        out.append(f.model_copy(update={"provenance": lines}) if lines else f)
    return report.model_copy(update={"findings": out})


def _named_by_chain(report: TargetReport, f: Finding, began: str, pred: PredictedCollective) -> Finding:
    """A finding whose collective no argument reaches as its operand (a value the argument became through a
    loop carry, calls and elementwise ops: jax-cfd's vorticity through its RK stages into each FFT), named
    after the argument its chain begins at, with that argument's axes moved off the dimensions they shard on
    the collective's axes as the fix to compile (fix_checks.py measures it; it is printed only when better).
    Left as it is where the rule's fix is not an argument's layout, the finding names an argument or a
    constraint already, or no other dimension takes the axes."""
    rule = RULES.get(f.rule)
    path = began.removeprefix("argument ")
    t = next((t for t in report.inputs if t.path == path), None) if began.startswith("argument ") else None
    if (rule is None or rule.traits.fix is not FixKind.parameter or f.parameter or f.constraint is not None
            or t is None or not t.sharding):
        return f
    axes = {a.split(":")[0] for a in pred.mesh_axes}
    dims = {d for d, held in enumerate(t.sharding) if any(a.split(":")[0] in axes for a in held)}
    suggested = moved_off(t, dims, dict(report.mesh))
    if suggested is None:
        return f
    # The message said no argument reaches the operand; the chain says which one it comes from (jax-cfd's
    # SL105 on h100 said both, one above the other).
    message = (f.message.removesuffix(NO_ARGUMENT) + f": it comes from {t.path} {pspec_text(t.sharding)}, through "
               "the values the chain below carries from it" if f.message.endswith(NO_ARGUMENT) else f.message)
    return f.model_copy(update={
        "message": message,
        "parameter": t.path, "parameter_sharding": t.sharding, "suggested_sharding": suggested,
        "fix": (f"shard {t.path} as {pspec_text(suggested)} instead of {pspec_text(t.sharding)} (off the dimension "
                "the op reads along, in the value the chain below carries from it)")})


def _other_side(report: TargetReport, p: Propagated, f: Finding, at_line: list[PredictedCollective],
                meets: ConflictCheck, display: Callable[[SourceLocation], str]) -> list[str]:
    """The first predicted collective at the line whose chain begins at another argument whose sharding takes
    part in the finding's collectives (``meets``: compiled with it replicated, they change): the chain, its
    first line saying which argument's layout the named one meets. None where no such argument is."""
    by_path = {t.path: t for t in report.inputs}
    for pred in at_line:
        value = p.graph.tensors_by_name().get(pred.value)
        began = _began_at(p, value) if value is not None else ""
        other = by_path.get(began.removeprefix("argument ")) if began.startswith("argument ") else None
        if value is None or other is None or other.path == f.parameter or not meets(report, f, other.path):
            continue
        return ([f"meets {other.path} {pspec_text(other.sharding or [])}, the other side of the conflict "
                 f"(replicated, it changes this collective): predicted {pred.kind} over "
                 f"{', '.join(pred.mesh_axes)}: {pred.reason}"] + explain(p, value, display)[1:])
    return []


def _began_at(p: Propagated, t: Tensor) -> str:
    """What the value's provenance chain begins at: ``argument <path>`` for an argument, else its type."""
    first = p.graph.tensors_by_name().get(p.provenance(t)[-1].value)
    return user_label(first) if first is not None else ""


def _output_chain(report: TargetReport, p: Propagated, t: Tensor, subject: str,
                  display: Callable[[SourceLocation], str]) -> list[str]:
    """Why an output has its layout, where propagation's layout for it is the one XLA compiled: a chain
    that ends at another layout explains a program XLA did not build (on a Llama step, a norm weight
    propagation shards on data that XLA returns sharded on model), so it is not printed."""
    compiled = next((o for o in report.outputs if o.path == subject), None)
    predicted = p.labels(t)
    if compiled is None or compiled.sharding is None or (
            normalized(compiled.sharding, len(compiled.shape)) == normalized(predicted, len(compiled.shape))):
        return explain(p, t, display)
    return [f"our sharding propagation gives this output {pspec_text(predicted)}, not the compiled "
            f"{pspec_text(compiled.sharding)}: it did not reproduce XLA's layout, so no chain is shown"]
