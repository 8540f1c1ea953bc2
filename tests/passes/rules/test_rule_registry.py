"""The rule registry: unique stable codes, kebab-case names, complete docs."""

import re

from jax_shard_lint.passes.rules.registry import DOC_SECTIONS
from jax_shard_lint.passes.rules.table import RULES, all_options


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


def test_options_are_read_by_the_declared_constant():
    """A rule reads a threshold by the RuleOption its file (or the rule that owns it) declares, never by a
    string key; every such constant is declared in one rule's options, so --threshold and the docs know it."""
    import importlib
    import os

    from conftest import ROOT

    from jax_shard_lint.passes.rules.registry import RuleOption

    declared = {id(o) for r in RULES.values() for o in r.options}
    folder = os.path.join(ROOT, "passes", "rules")
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".py"):
            continue
        with open(os.path.join(folder, f), encoding="utf-8") as src:
            assert 'options["' not in src.read(), f"{f} reads an option by its string key"
        module = importlib.import_module(f"jax_shard_lint.passes.rules.{f[:-3]}")
        for name, value in vars(module).items():
            if isinstance(value, RuleOption):
                assert id(value) in declared, f"{f}: {name} is in no rule's options"


def test_lower_layers_know_no_rule():
    """A rule's traits (how its findings are explained, how its fix is compiled) and its reworks are in its
    file: the analyses the rules read never name a rule code."""
    import os

    from conftest import ROOT

    for layer in ("common", "hlo", "stablehlo", "propagation", "source"):
        folder = os.path.join(ROOT, "passes", layer)
        for f in sorted(os.listdir(folder)):
            if f.endswith(".py"):
                with open(os.path.join(folder, f), encoding="utf-8") as src:
                    text = src.read()
                assert "rule_codes" not in text, f"passes/{layer}/{f} imports a rule code"


def test_traits_are_read_from_the_rules():
    from jax_shard_lint.analyzer.backend import fix_checks
    from jax_shard_lint.passes.models.report import Finding, Severity
    from jax_shard_lint.passes.rules.finding_provenance import explained
    from jax_shard_lint.passes.rules.registry import FixKind, Provenance

    assert fix_checks._PARAMETER_FIXES == {c for c, r in RULES.items() if r.traits.fix is FixKind.parameter}
    for code, r in RULES.items():
        f = Finding(rule=code, name=r.name, severity=Severity.warning, message="m", source=None)
        assert explained([f]) is (r.traits.provenance is not Provenance.none)
