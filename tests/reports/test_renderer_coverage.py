"""Every (command, format) the command line offers has a content test: the pairs are the CLI's commands
and the --format choices each takes (analyzer/cli/main.py's parser, whose choices come from
reports/registry.py, or the command's own, as ``rules``'), and the covered ones are those the
tests/reports/test_*_reports.py and test_rules_table.py files render through report_samples (render_text,
render_terminal, render_cli) in a run of them, not a list they declare."""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys

from report_samples import RENDERED_LOG

from jax_shard_lint.analyzer.cli.main import build_parser


def command_line_pairs() -> set[tuple[str, str]]:
    """(command, format) for every command with a --format option, each of its choices."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {(command, fmt) for command, parser in commands.choices.items() for action in parser._actions
            if "--format" in action.option_strings for fmt in action.choices or ()}


def test_every_format_the_command_line_offers_has_a_content_test(tmp_path):
    here = os.path.dirname(__file__)
    log = tmp_path / "rendered.txt"
    content_tests = sorted(glob.glob(os.path.join(here, "test_*_reports.py"))) + [
        os.path.join(here, "test_rules_table.py")]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *content_tests],
        env={**os.environ, RENDERED_LOG: str(log)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rendered = {tuple(line.split()) for line in log.read_text(encoding="utf-8").splitlines()}
    offered = command_line_pairs()
    assert ("lint", "sarif") in offered and ("fit", "json") in offered  # the parser was read
    assert offered - rendered == set(), "formats the command line offers that no content test renders"
    assert rendered - offered == set(), "renders of formats the command line does not offer"
