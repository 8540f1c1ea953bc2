"""``suggest`` as Markdown for a pull-request comment."""

from __future__ import annotations

from ...passes.common.sharding_text import pspec_text
from ...passes.models.suggest import SuggestRun
from ..common.markdown_text import cell, code_block
from .summary import (
    MAX_ROWS,
    PLAN_HEAD,
    VERSION_HEAD,
    changed_arguments,
    jit_code,
    logical_rule_lines,
    placement_jit,
    placement_why,
    plan_rows,
    solver_line,
    version_cells,
)


def render_suggest_markdown(run: SuggestRun) -> str:
    lines: list[str] = []
    for r in run.targets:
        lines += [f"### jax-shard-lint suggest: {cell(r.name)}", "", cell(r.verdict), "",
                  f"Solver: {cell(solver_line(r, plans_inline=False))}", ""]
        lines += ["| " + " | ".join(VERSION_HEAD[:-1]) + " |", "| --- | ---: | ---: | ---: | ---: |"]
        for v in r.versions:
            cells = [cell(c) for c in version_cells(v)[:-1]]
            cells[0] = f"**{cells[0]}**" if v.name == r.chosen else cells[0]
            lines.append("| " + " | ".join(cells) + " |")
        if len(r.solver.plans) > 1:
            lines += ["", "| " + " | ".join(PLAN_HEAD) + " |", "| --- |" + " ---: |" * 5 + " --- |"]
            lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in plan_rows(r)]
        changed = changed_arguments(r)
        if changed:
            lines += ["", "| argument | written | suggested |", "| --- | --- | --- |"]
            lines += [f"| {cell(a.path)} | {cell(pspec_text(a.current))} | {cell(pspec_text(a.suggested))} |"
                      for a in changed[:MAX_ROWS]]
        if r.placement_text:
            code = r.placement_text + (f"\n{placement_jit(r)}" if placement_jit(r) else "")
            lines += ["", placement_why(r) + ".", "", *code_block(code)]
        elif jit_code(r):
            lines += ["", *code_block(jit_code(r) or "")]
        if r.logical_rules is not None:
            lines += ["", *(cell(x) for x in logical_rule_lines(r)), "", *code_block(r.logical_rules.rules_text)]
        lines.append("")
    return "\n".join(lines) + "\n"
