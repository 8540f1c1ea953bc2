"""The rule catalogue as a Markdown table: ``jax-shard-lint rules --format markdown``, and the table
docs/rules.md holds (a test keeps the two equal, so the docs never restate a rule by hand)."""

from __future__ import annotations

from ...passes.models.report import RuleDoc


def rules_markdown(docs: list[RuleDoc]) -> str:
    """One row per rule: code, name, default severity, and the first paragraph of its documentation.
    The text is the rules' own (their docstrings), so backticks stay code; a pipe would end a cell."""

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    rows = ["| code | name | severity | summary |", "| --- | --- | --- | --- |"]
    rows += [f"| {d.code} | {d.name} | {d.severity.value} | {cell(d.summary)} |" for d in docs]
    return "\n".join(rows) + "\n"
