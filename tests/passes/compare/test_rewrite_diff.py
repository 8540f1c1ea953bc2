"""rewrite's before/after comparison (passes/compare/rewrite_diff.py): collectives
matched across versions by what they are, bytes per step summed over matching
ops, and a verdict that names the direction of each change. The inputs are built
by hand so that every expected figure is arithmetic on them (brute force)."""

from __future__ import annotations

import itertools

import pytest

from jax_shard_lint.passes.compare.rewrite_diff import collective_changes, verdict
from jax_shard_lint.passes.models.report import Collective, SourceLocation
from jax_shard_lint.passes.models.rewrite import ProgramFacts

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

LINE_10 = SourceLocation(file="train.py", line=10)
LINE_20 = SourceLocation(file="train.py", line=20)


def _c(kind: str, nbytes: int, count: int = 1, axes=("data",), source=LINE_10, shape=(64, 32)) -> Collective:
    return Collective(kind=kind, bytes=nbytes, count=count, mesh_axes=list(axes), shape=list(shape), dtype="f32",
                      op_name=None, source=source, hlo_name=f"{kind}.{nbytes}.{count}", computation="main",
                      group_size=8)


def test_changes_are_matched_by_what_the_collective_is_and_summed_per_step():
    before = [_c("all-gather", 1000, 2), _c("all-gather", 1000, 1), _c("all-reduce", 400, axes=("model",)),
              _c("all-to-all", 64, source=LINE_20)]
    after = [_c("all-gather", 1000, 1), _c("reduce-scatter", 125, 4), _c("all-to-all", 64, source=LINE_20)]
    got = {(c.change, c.kind, tuple(c.mesh_axes)): (c.bytes_before, c.bytes_after) for c in collective_changes(
        before, after)}
    assert got == {
        ("changed", "all-gather", ("data",)): (3000, 1000),
        ("removed", "all-reduce", ("model",)): (400, 0),
        ("added", "reduce-scatter", ("data",)): (0, 500),
    }


def test_the_same_collective_at_two_lines_is_two_collectives():
    changes = collective_changes([_c("all-gather", 100, source=LINE_10)], [_c("all-gather", 100, source=LINE_20)])
    assert sorted((c.change, c.source.line) for c in changes) == [("added", 20), ("removed", 10)]


def test_order_of_the_collectives_does_not_change_the_result():
    before = [_c("all-gather", 1000, 2), _c("all-reduce", 400), _c("all-gather", 10, source=LINE_20)]
    after = [_c("all-gather", 1000), _c("all-reduce", 800)]
    results = {tuple(c.model_dump_json() for c in collective_changes(list(b), list(a)))
               for b in itertools.permutations(before) for a in itertools.permutations(after)}
    assert len(results) == 1


def _facts(collective_bytes: int, peak: int) -> ProgramFacts:
    return ProgramFacts(peak_bytes=peak, argument_bytes=0, output_bytes=0, temp_bytes=0, alias_bytes=0,
                        collective_bytes=collective_bytes, collectives=[], outputs=[])


@pytest.mark.parametrize(("before", "after", "head"), [
    ((4096, 1000), (0, 1000), "The rewrite removes communication"),
    ((4096, 1000), (4096, 500), "The rewrite lowers the peak"),
    ((0, 1000), (4096, 1000), "The rewrite moves the cost into this step"),
    ((4096, 1000), (4096, 1000), "The rewrite changes nothing this step can see"),
])
def test_the_verdict_names_the_direction(before, after, head):
    text = verdict(_facts(*before), _facts(*after), [])
    assert text.startswith(head) and "see remaining" not in text
    assert "see remaining" in verdict(_facts(*before), _facts(*after), ["x.py:1: all-gather"])
