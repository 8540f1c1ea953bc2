"""Writes docs/rules.md's rule table from the rules themselves (passes/rules/table.py: each rule's code,
name, severity and docstring summary), the text `jax-shard-lint rules --format markdown` prints.

    python3 docs/generate_rules_table.py           # rewrite the table between its markers
    python3 docs/generate_rules_table.py --check   # exit 1 where docs/rules.md differs

tests/reports/test_rules_table.py fails while the two differ."""

from __future__ import annotations

import argparse
import os
import re
import sys

from jax_shard_lint.passes.rules.table import rule_docs
from jax_shard_lint.reports.common.rules_table import rules_markdown

RULES_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules.md")
# The table's place: from the opening marker's line to the closing marker.
BLOCK = re.compile(r"(<!-- generated: jax-shard-lint rules --format markdown[^\n]*-->\n)(.*?)(<!-- end generated -->)",
                   re.S)


def generated(docs_text: str) -> str:
    """docs/rules.md's text with its table the generated one."""
    if not BLOCK.search(docs_text):
        raise SystemExit(f"{RULES_MD}: no generated rule table (its markers are missing)")
    return BLOCK.sub(lambda m: m.group(1) + rules_markdown(rule_docs()) + m.group(3), docs_text, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where docs/rules.md differs, write nothing")
    args = parser.parse_args()
    with open(RULES_MD, encoding="utf-8") as f:
        text = f.read()
    new = generated(text)
    if new == text:
        return 0
    if args.check:
        print(f"{RULES_MD}: the rule table is stale: run python3 docs/generate_rules_table.py", file=sys.stderr)
        return 1
    with open(RULES_MD, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"wrote {RULES_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
