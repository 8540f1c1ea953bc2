"""The rules stage the target pipelines (lint, check) share: the one place a
``RuleContext`` is built, and the target rules run over it, their findings
grouped by cause and sorted; and the rules a report documents (report_rules)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..models.entry import EntrySignature
from ..models.report import Finding, RuleDoc, Severity, SourceLocation, TensorInfo
from ..models.rule_codes import Scope
from ..rules.context import RuleContext
from ..rules.group_by_cause import group_by_cause
from ..rules.registry import Emitter
from ..rules.table import RULES, rule_docs
from ..stablehlo.module import EntrySources
from .inputs import PassConfig


def rule_context(
    name: str, platform: str, signature: EntrySignature, config: PassConfig, *,
    inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...], sources: EntrySources | None = None,
    entry_source: SourceLocation | None = None, **facts: Any,
) -> RuleContext:
    """What a target rule sees: the signature, the options resolved, the source lines (``sources`` read from
    the StableHLO, or only ``entry_source`` where there is none), the facts the earlier stages found, and the
    collectives the rules claim (computed once, here: the rules and SL105's note of what it leaves out read them)."""
    if sources is not None:
        facts.update(entry_source=sources.entry, input_sources=sources.inputs, output_sources=sources.outputs)
    else:
        facts.update(entry_source=entry_source)
    return with_claims(RuleContext(target=name, platform=platform, signature=signature, inputs=inputs,
                                   outputs=outputs, options=config.resolved_options(), where=config.where,
                                   **facts))


def claims_by_rule(ctx: RuleContext) -> dict[str, frozenset[str]]:
    """The collectives each rule's findings explain (its ``RuleTraits.claims``), the disabled rules' too: a
    collective one rule explains is not another's to report as unexplained. In code order, each rule's claims
    given those of the rules before it (its context's ``claimed_collectives``): one collective, one rule."""
    claims: dict[str, frozenset[str]] = {}
    claimed: frozenset[str] = frozenset()
    for code in sorted(RULES):
        if (claim := RULES[code].traits.claims) is None:
            continue
        claims[code] = frozenset(claim(dataclasses.replace(ctx, claimed_collectives=claimed))) - claimed
        claimed |= claims[code]
    return claims


def claimed_collectives(ctx: RuleContext) -> frozenset[str]:
    """Every rule's claimed collectives (``claims_by_rule``)."""
    return frozenset(name for claimed in claims_by_rule(ctx).values() for name in claimed)


def with_claims(ctx: RuleContext) -> RuleContext:
    """The context with every rule's claimed collectives, as the rules (and SL105's note of what it leaves
    out) read it."""
    claims = claims_by_rule(ctx)
    return dataclasses.replace(ctx, claimed_collectives=frozenset(n for c in claims.values() for n in c),
                               claims_by_rule=claims)


def run_rules(ctx: RuleContext, config: PassConfig) -> list[Finding]:
    findings: list[Finding] = []
    for code in sorted(RULES):
        r = RULES[code]
        if r.scope is not Scope.TARGET or code in config.disabled:
            continue
        emitter = Emitter(r, config.severities.get(code, r.severity))
        r.check(ctx, emitter)
        findings.extend(group_by_cause(emitter.findings, ctx.inputs))
    for code in sorted(RULES):  # each rule's merge of its findings with another's (its traits'), the disabled too
        if (merge := RULES[code].traits.merge_findings) is not None:
            findings = merge(findings)
    return sort_findings(findings)


def run_rule(ctx: RuleContext, config: PassConfig, code: str) -> list[Finding]:
    """One target rule's findings, whatever the configuration disables: a fact a figures-only report keeps
    (SL104's rematerializations: a fix candidate XLA compiles with one is not better, fix_checks.py)."""
    r = RULES[code]
    emitter = Emitter(r, config.severities.get(code, r.severity))
    r.check(ctx, emitter)
    return sort_findings(group_by_cause(emitter.findings, ctx.inputs))


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (
        -f.severity.rank, f.rule,
        f.source.file if f.source else "", f.source.line if f.source else 0, f.subject or "", f.message,
    ))




def report_rules(disabled: frozenset[str], severities: dict[str, Severity]) -> list[RuleDoc]:
    """The rules a report documents: every rule the run enabled, at its configured severity."""
    return rule_docs(disabled, severities)
