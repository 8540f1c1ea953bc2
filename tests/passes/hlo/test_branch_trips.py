"""A collective in a ``lax.cond`` branch inside a loop is counted on the trips that take the branch
(fixtures/scripts/cond_in_loop.py): ott's Sinkhorn computes its error under a cond on 1 of its 10 inner
iterations, and counting every branch on every trip read its 4 GiB all-reduce as 10 runs per outer trip
(newbie18 F2). Expected figures come from XLA's compiled text (the while's known_trip_count, its body's
conditional, the branch holding the all-reduce) and from the program's own predicate, evaluated here; a
predicate data decides is counted 0 to the trip count, said as a lower bound in every format."""

import json
import os
import re

import numpy as np
import pytest
from conftest import FIXTURES
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "cond_in_loop.py")


def _block(text: str, name: str) -> str:
    return re.search(rf"\n%?{re.escape(name)} [^\n]*\{{\n(.*?)\n\}}", text, re.S).group(1)


def _xla_branch(text: str) -> tuple[int, int, str]:
    """(the loop's trip count, the index of the branch holding the all-reduce, that all-reduce's name), from XLA's
    text: the while XLA counted, the conditional in its body, the branch computations it lists."""
    [loop] = re.findall(r"= [^\n]* while\([^\n]*", text)
    trips = int(re.search(r'"known_trip_count":\{"n":"(\d+)"\}', loop).group(1))
    body = re.search(r"body=%?([\w.\-]+)", loop).group(1)
    [branches] = re.findall(r"conditional\([^\n]*branch_computations=\{([^}]*)\}", _block(text, body))
    held = [(k, re.findall(r"%([\w.\-]+) = [^\n]* all-reduce(?:-start)?\(", _block(text, b.strip().lstrip("%"))))
            for k, b in enumerate(branches.split(","))]
    [(index, [name])] = [(k, names) for k, names in held if names]
    return trips, index, name


@pytest.fixture(scope="module")
def xla():
    return {name: _xla_branch(lowered.compile().as_text())
            for name, lowered in script_module(SCRIPT).shard_lint_targets().items()}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from jax_shard_lint.analyzer.cli.main import run_command

    out = tmp_path_factory.mktemp("cond") / "r"
    for fmt in ("json", "html", "markdown"):
        assert run_command(["lint", SCRIPT, "--fail-on", "never", "--no-fix-check", "-q", "--format", fmt,
                            "-o", f"{out}.{fmt}"]) == 0
    targets = {t["name"]: t for t in json.loads(open(f"{out}.json").read())["targets"]}
    return targets, open(f"{out}.html").read(), open(f"{out}.markdown").read()


def _collective(target: dict, name: str) -> dict:
    [c] = [c for c in target["collectives"] if c["hlo_name"] == name]
    return c


def test_a_branch_the_counter_selects_is_counted_on_the_trips_that_take_it(xla, report):
    targets, _, _ = report
    for target, predicate in (("every_fifth", lambda i, n: i % 5 == 0),
                              ("flag_array", lambda i, n: (np.arange(n) == n - 1)[i])):
        trips, index, name = xla[target]
        assert index == 1  # lax.cond's true function is branch 1 (XLA's index: the predicate converted)
        taken = sum(bool(predicate(i, trips)) for i in range(trips))
        assert 0 < taken < trips
        c = _collective(targets[target], name)
        assert (c["count"], c["count_is_lower_bound"], c.get("count_in_branch", False)) == (taken, False, False), c


def test_a_branch_data_selects_is_counted_from_none_to_every_trip(cli, xla, report):
    targets, html, markdown = report
    trips, _, name = xla["data_decides"]
    c = _collective(targets["data_decides"], name)
    assert (c["count"], c["count_upper_bound"], c["count_is_lower_bound"], c["count_in_branch"]) == (
        0, trips, True, True), c
    assert f">0-{trips}?</td>" in html and "at least " in html
    assert "| at least " in markdown
    terminal = cli("lint", SCRIPT, "--target", "data_decides", "--fail-on", "never", "--no-fix-check")
    summary = " ".join(terminal.out.split())
    assert re.search(r"at least [\d.]+ \w?i?B per step per device \(1 in conditional branches data selects, counted "
                     r"only on the trips certainly taking them; at most [\d.]+ \w?i?B were each branch taken on "
                     r"every trip\)", summary), summary
    assert f"0-{trips}?" in terminal.out
