"""SARIF 2.1.0, so code-scanning tools annotate pull requests with findings."""

from __future__ import annotations

import json
from urllib.parse import quote

from ...passes.models.report import Finding, LintReport, Severity

LEVEL = {Severity.error: "error", Severity.warning: "warning", Severity.info: "note"}
INFORMATION_URI = "https://pypi.org/project/jax-shard-lint/"
# Every uriBaseId a location names, declared in the run's originalUriBaseIds (SARIF 2.1.0 §3.14.14). Neither
# root is written as a URI: the checkout and the Python environment are wherever the reader has them, and the
# log stays the same on every machine: each is declared with a description and no uri, as the spec allows
# where the producer does not state the root.
SOURCE_ROOT = "%SRCROOT%"
SITE_PACKAGES = "SITE_PACKAGES"
URI_BASES = {
    SOURCE_ROOT: {"description": {"text": "The checkout the linted script is in: first-party files are relative "
                                          "to it."}},
    SITE_PACKAGES: {"description": {"text": "The site-packages folder of the Python environment the step ran in: "
                                            "a library line a finding's call went through is relative to it."}},
}


def _rule(doc, index: int) -> dict:
    return {
        "id": doc.code,
        "name": "".join(part.capitalize() for part in doc.name.split("-")),
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.doc},
        "help": {"text": doc.doc, "markdown": doc.doc},
        "defaultConfiguration": {"level": LEVEL[doc.severity]},
        "properties": {"tags": ["sharding", "performance"], "kebab-name": doc.name},
    }


def _result(f: Finding, target: str | None, index: dict[str, int], script: str | None) -> dict:
    text = f.message + (f" Fix: {f.fix}" if f.fix else "")
    result: dict = {
        "ruleId": f.rule,
        "level": LEVEL[f.severity],
        "message": {"text": text},
        "properties": {"target": target, "fix": f.fix, "subject": f.subject, "provenance": f.provenance,
                       "count": f.count, "bytes": f.bytes, "ops": f.ops, "parameter": f.parameter,
                       "parameter_sharding": f.parameter_sharding, "suggested_sharding": f.suggested_sharding,
                       "fix_check": f.fix_check.model_dump(mode="json") if f.fix_check else None},
    }
    if f.rule in index:
        result["ruleIndex"] = index[f.rule]
    if f.via is not None:
        result["properties"]["via"] = str(f.via)
        # The library line the user's call went through: a package path, under site-packages.
        result["relatedLocations"] = [{
            "id": 1, "message": {"text": f"via {f.via}"},
            "physicalLocation": {"artifactLocation": {"uri": quote(f.via.file.replace("\\", "/")),
                                                      "uriBaseId": SITE_PACKAGES},
                                 "region": {"startLine": max(1, f.via.line)}}}]
    uri = f.source.file if f.source else script
    if uri:
        uri = uri.replace("\\", "/")
        # First-party files are relative to the checkout (%SRCROOT%), which is what code
        # scanning annotates; a file outside it can only be named absolutely.
        artifact = ({"uri": "file://" + quote(uri)} if uri.startswith("/")
                    else {"uri": quote(uri), "uriBaseId": SOURCE_ROOT})
        location: dict = {"artifactLocation": artifact}
        if f.source:
            location["region"] = {"startLine": max(1, f.source.line)}
        result["locations"] = [{"physicalLocation": location}]
    return result


def render_sarif(report: LintReport) -> str:
    index = {doc.code: i for i, doc in enumerate(report.rules)}
    results = [_result(f, t.name, index, report.script) for t in report.targets for f in t.findings]
    results += [_result(f, None, index, report.script) for f in report.findings]
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "jax-shard-lint", "version": report.tool_version, "informationUri": INFORMATION_URI,
                "rules": [_rule(doc, i) for i, doc in enumerate(report.rules)],
            }},
            "originalUriBaseIds": URI_BASES,
            "results": results,
            "properties": {"jax_version": report.jax_version, "jaxlib_version": report.jaxlib_version,
                           "command": report.command, "targets": [t.name for t in report.targets]},
        }],
    }
    return json.dumps(sarif, indent=2) + "\n"
