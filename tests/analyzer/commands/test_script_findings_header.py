"""A target's header counts what is found in it, and says where the script's own source findings are: below
the targets (newbie19b F6: md_driver's header said 'findings none' above SL403 on the loop that feeds the step
its outputs, and the footer counted 1 finding)."""

import json
import os

SCRIPT = os.path.join("fixtures", "scripts", "lint_loop_without_out_shardings.py")


def test_the_header_says_the_scripts_findings_are_below(cli):
    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    [target] = report["targets"]
    [sl403] = report["findings"]
    assert (target["findings"], sl403["rule"], sl403["source"]["line"]) == ([], "SL403", 25)

    text = cli("lint", SCRIPT, "--fail-on", "never").out
    [header] = [line for line in text.splitlines() if line.startswith("findings ")]
    assert " ".join(header.split()) == "findings none; the script's source: 1 warning (SL403), below", header
    assert "1 target(s), 1 finding(s)" in text
