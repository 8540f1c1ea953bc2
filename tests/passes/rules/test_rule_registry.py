"""The rule registry: unique stable codes, kebab-case names, complete docs."""

import re

from jax_shard_lint.passes.rules import RULES
from jax_shard_lint.passes.rules.registry import DOC_SECTIONS
from jax_shard_lint.passes.rules.table import all_options


def test_codes_and_names_are_unique_and_well_formed():
    names = [r.name for r in RULES.values()]
    assert len(names) == len(set(names))
    for code, r in RULES.items():
        assert r.code == code and re.fullmatch(r"SL\d{3}", code)
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", r.name)


def test_every_rule_documents_every_section():
    for r in RULES.values():
        assert r.summary and not r.summary.endswith(":")
        for section in DOC_SECTIONS:
            assert r.section(section), f"{r.code} lacks '{section}'"


def test_options_are_documented_and_unique():
    seen = {}
    for r in RULES.values():
        for o in r.options:
            assert o.name not in seen, f"{o.name} declared by {seen.get(o.name)} and {r.code}"
            seen[o.name] = r.code
            assert o.help and o.kind.value in ("bytes", "fraction", "ratio", "int")
            assert f"`{o.name}`" in r.doc, f"{r.code}'s documentation does not explain `{o.name}`"
    assert set(all_options()) == set(seen)


def test_one_file_per_rule_and_the_table_lists_every_code_once():
    """rule_codes.py names every rule, each has its file (named after its code), table.py lists each once, in order."""
    import os

    from conftest import ROOT

    from jax_shard_lint.passes.models.rule_codes import ALL_CODES

    assert list(RULES) == [c.code for c in ALL_CODES]
    files = sorted(f for f in os.listdir(os.path.join(ROOT, "passes", "rules")) if f[:2] == "sl" and f[2:5].isdigit())
    assert files == sorted(f"{c.code.lower()}_{c.name.replace('-', '_')}.py" for c in ALL_CODES)
    for c in ALL_CODES:
        assert (RULES[c.code].name, RULES[c.code].scope) == (c.name, c.scope)
