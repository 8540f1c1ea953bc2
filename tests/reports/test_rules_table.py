"""docs/rules.md's rule table is what `jax-shard-lint rules --format markdown` prints: the rules'
own codes, names, severities and summaries (their docstrings), never restated by hand."""

import os
import re

from conftest import ROOT
from report_samples import render_cli


def test_docs_rule_table_is_the_generated_one(cli):
    result = render_cli(cli, "rules", "markdown")
    assert result.code == 0
    with open(os.path.join(ROOT, "docs", "rules.md"), encoding="utf-8") as f:
        docs = f.read()
    m = re.search(r"<!-- generated: jax-shard-lint rules --format markdown[^\n]*-->\n(.*?)<!-- end generated -->",
                  docs, re.S)
    assert m, "docs/rules.md has no generated rule table"
    assert m.group(1) == result.out, "docs/rules.md's table is stale: run python3 docs/generate_rules_table.py"


def test_the_terminal_list_names_every_rule_with_its_severity(cli, monkeypatch):
    from jax_shard_lint.passes.rules.table import rule_docs

    monkeypatch.setenv("COLUMNS", "250")  # wide enough that no name wraps
    result = render_cli(cli, "rules", "terminal")
    assert result.code == 0 and "jax-shard-lint rules" in result.out
    rows = {line.split("│")[1].strip(): line for line in result.out.splitlines() if re.match(r"│ SL\d{3} ", line)}
    for d in rule_docs():
        assert d.name in rows[d.code] and f" {d.severity.value} " in rows[d.code], d.code


def test_every_rule_is_a_row_once():
    from jax_shard_lint.passes.rules.table import rule_docs
    from jax_shard_lint.reports.common.rules_table import rules_markdown

    docs = rule_docs()
    rows = rules_markdown(docs).splitlines()[2:]
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == [d.code for d in docs]


def test_the_generator_writes_the_table_the_cli_prints(cli):
    """docs/generate_rules_table.py puts the CLI's table between the markers, and only there."""
    import importlib.util

    path = os.path.join(ROOT, "docs", "generate_rules_table.py")
    spec = importlib.util.spec_from_file_location("generate_rules_table", path)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    opening, closing = "<!-- generated: jax-shard-lint rules --format markdown -->\n", "<!-- end generated -->"
    stale = f"before\n{opening}| old |\n{closing}\nafter\n"
    result = cli("rules", "--format", "markdown")
    assert generator.generated(stale) == f"before\n{opening}{result.out}{closing}\nafter\n"
