"""Findings about the jit call's options put on the ``jax.jit(...)`` line, where they are edited.

The lint pipeline places SL202 (missing donation: ``donate_argnums`` goes in the jit call) and SL201 on an
output whose out_shardings the jit call states at the line the program's locations name: the one that
lowered or called the jitted function (``out[k] = jitted.lower(*args)``). Where the script shows which
``jax.jit`` call that function came from (inputs/jit_sites.py), the finding's source is that call's line
and the lowering line its ``via``, the context of how it was reached."""

from __future__ import annotations

import os

from ...passes.models.report import Finding, SourceLocation, TargetReport
from ...passes.pipelines.catalogue import DONATION_FIXES, OUTPUT_LAYOUT_RULES
from ..inputs.jit_sites import DONATION, OUT_SHARDINGS, jit_call_line

# How SL201 says an output's layout is the jit call's out_shardings' (not computed by the step).
_STATED = "out_shardings states"


def at_jit_calls(report: TargetReport) -> TargetReport:
    """The report with its jit-option findings on the jit call's line, where the script tells it."""
    donates = any(t.donated for t in report.inputs)
    texts: dict[str, str | None] = {}
    changed = False
    findings: list[Finding] = []
    for f in report.findings:
        options: dict[tuple[str, ...], bool] | None = (
            {DONATION: donates} if f.rule in DONATION_FIXES
            else {DONATION: donates, OUT_SHARDINGS: True} if f.rule in OUTPUT_LAYOUT_RULES and _STATED in f.message
            else None)
        line = None
        if options is not None and f.source is not None:
            text = texts.setdefault(f.source.file, _read(f.source.file))
            line = jit_call_line(text, f.source.line, options) if text is not None else None
        if line is None or f.source is None or line == f.source.line:
            findings.append(f)
            continue
        changed = True
        findings.append(f.model_copy(update={"source": SourceLocation(file=f.source.file, line=line),
                                             "via": f.source}))
    return report.model_copy(update={"findings": findings}) if changed else report


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read() if os.path.getsize(path) < 5_000_000 else None
    except OSError:
        return None
