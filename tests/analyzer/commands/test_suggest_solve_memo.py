"""suggest's solves are kept with its compiles in the analysis cache's folder (analyzer/backend/advice/
solve_memo.py), and so are the plans' checks against propagation: run again with another --format, it solves and
propagates nothing (newbie15's GraphNet solved its 89,977-variable problem again on a rerun with --format json while
every compile was read back), and reports the same plans. The oracle is the count of calls of the solver itself
(``solve``) and of the check (``_check``), as the suggest pipeline calls them."""

from __future__ import annotations

import json
import os

from jax_shard_lint.passes.pipelines import suggest as suggest_pipeline

ARGS = ("suggest", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_states", "-q")


def test_a_second_run_reads_every_solve_from_the_cache(cli, monkeypatch, tmp_path):
    solves, checks = [], []
    real, real_check = suggest_pipeline.solve, suggest_pipeline._check

    def counted(*args, **kwargs):
        solves.append(args[0].size)
        return real(*args, **kwargs)

    def counted_check(*args, **kwargs):
        checks.append(args[0].size)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(suggest_pipeline, "solve", counted)
    monkeypatch.setattr(suggest_pipeline, "_check", counted_check)
    cached = ("--cache-dir", str(tmp_path))
    first = cli(*ARGS, *cached, "--format", "json")
    assert first.code == 0, first.err[-2000:]
    solved, checked = len(solves), len(checks)
    assert solved >= 2  # the refine loop's solve, and one per compiled version for its cost model
    assert checked >= 1
    again = cli(*ARGS, *cached)  # the terminal report
    assert again.code == 0, again.err[-2000:]
    assert len(solves) == solved, "the second run solved again"
    assert len(checks) == checked, "the second run checked a plan against propagation again"
    assert "certified gap" in " ".join(again.out.split())  # the terminal may wrap the solver line anywhere
    third = cli(*ARGS, *cached, "--format", "json")
    assert len(solves) == solved and json.loads(third.out) == json.loads(first.out)
    # Without the cache every solve runs again.
    uncached = cli(*ARGS, "--no-cache", "--format", "json")
    assert uncached.code == 0 and len(solves) == 2 * solved and len(checks) == 2 * checked
    assert json.loads(uncached.out) == json.loads(first.out)
