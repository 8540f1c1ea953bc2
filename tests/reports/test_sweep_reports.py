"""sweep's reports (terminal, HTML, Markdown, JSON) on one small report built here."""

from __future__ import annotations

from report_samples import (
    HEADER,
    HOSTILE,
    HOSTILE_HTML,
    HOSTILE_MARKDOWN,
    MiB,
    assert_inert_html,
    assert_inert_markdown,
    assert_inert_terminal,
    at,
    json_round_trip,
    render_terminal,
    render_text,
    step_time,
)

from jax_shard_lint.passes.models.report import Collective
from jax_shard_lint.passes.models.sweep import CandidateRun, SweepCandidate, SweepExecution, SweepRun

FAST = f"mesh_shape=(4, 2) / {HOSTILE}"
OVER = "mesh_shape=(8, 1) / step"


def run() -> SweepRun:
    gather = Collective(kind="all-gather", bytes=MiB, count=2, mesh_axes=["data"], shape=[512, 512], dtype="f32",
                        op_name=None, source=at(42), hlo_name="all-gather.1", computation="main", group_size=4)
    fast = SweepCandidate(label=FAST, params={"mesh_shape": [4, 2]}, target=HOSTILE, rank=1, fits=True,
                          peak_bytes=3 * MiB, budget_bytes=8 * MiB, collective_bytes=2 * MiB, seconds=0.002,
                          slowdown=1.0, pareto=True, time=step_time(0.002), top_collectives=[gather])
    over = SweepCandidate(label=OVER, params={"mesh_shape": [8, 1]}, target="step", fits=False, peak_bytes=12 * MiB,
                          budget_bytes=8 * MiB, collective_bytes=0, seconds=0.001, slowdown=0.5, pareto=True)
    execution = SweepExecution(executor="local", workers=2, wall_seconds=3.0, candidate_seconds=5.0, speedup=5 / 3,
                               mean_overhead_seconds=0.1, runs=[
                                   CandidateRun(label=FAST, params={"mesh_shape": [4, 2]}, worker=f"slot {HOSTILE}",
                                                seconds=2.5, overhead_seconds=0.1)])
    return SweepRun(**HEADER, platform="cpu", budget_bytes=8 * MiB, candidates=[fast, over], execution=execution)


def test_terminal():
    text = render_terminal("sweep", run())
    assert_inert_terminal(text)
    for figure in ("3.0 MiB", "12.0 MiB", "NO", "all-gather 1.0 MiB x2 over data at train.py:42", "2 ms", "1 ms"):
        assert figure in text, figure


def test_terminal_shows_names_as_written():
    assert_inert_terminal(render_terminal("sweep", run()))


def test_json():
    out = json_round_trip("sweep", run())
    assert [c["rank"] for c in out["candidates"]] == [1, None]


def test_html():
    page = render_text("sweep", "html", run())
    assert_inert_html(page)
    assert '<table class="sortable sweep"><thead><tr><th>point</th><th>rank</th><th>candidate</th>' in page
    # Every row carries its class (empty for a candidate that fits), figures sortable by their numbers.
    assert (f'<tr class=""><td>#1</td><td>1</td><td>mesh_shape=(4, 2) / {HOSTILE_HTML}</td>'
            '<td data-v="0.002">2 ms</td><td>1.00x</td><td data-v="3145728">3.0 MiB</td><td>yes</td>'
            '<td data-v="2097152">2.0 MiB</td><td data-v="0">0 B</td><td>yes</td>'
            "<td>all-gather 1.0 MiB x2 over data at train.py:42</td>"
            f'<td title="2.5 s on slot {HOSTILE_HTML}">2.5 s</td></tr>') in page
    assert ('<tr class="over"><td>#2</td><td>-</td><td>mesh_shape=(8, 1) / step</td><td data-v="0.001">1 ms</td>'
            '<td>0.50x</td><td data-v="12582912">12.0 MiB</td><td>NO</td>') in page
    assert '<svg class="sweepplot"' in page and 'data-points="2"' in page
    assert "Compiled in 2 local processes: 1 candidate(s) in 3 s (5 s of compiles, 1.67x)" in page


def test_markdown():
    text = render_text("sweep", "markdown", run())
    assert_inert_markdown(text)
    assert (f"| 1 | mesh_shape=(4, 2) / {HOSTILE_MARKDOWN} | 2 ms | 1.00x | 3.0 MiB | yes | 2.0 MiB | "
            "all-gather 1.0 MiB x2 over data at train.py:42 |") in text
    assert "| - | mesh_shape=(8, 1) / step | 1 ms | 0.50x | 12.0 MiB | NO | 0 B | no collectives |" in text


def test_the_headline_says_when_the_ranking_rests_on_lower_bounds_that_differ():
    """A loop whose trip count XLA does not know counts its collectives once: a diffrax step's layouts ranked by
    them were ranked on figures that undercount each differently (newbie16 F2). Counts as each report has them."""
    from jax_shard_lint.reports.sweep.summary import headline

    base = run()
    fast = base.candidates[0].model_copy(update={"unknown_loop_collectives": 5})
    second = fast.model_copy(update={"label": "second", "rank": 2, "slowdown": 1.5, "seconds": 0.003,
                                     "unknown_loop_collectives": 4})
    text = headline(base.model_copy(update={"candidates": [fast, second]}))
    assert ("the ranking rests on lower bounds that differ between them: collectives in loops whose trip count XLA "
            f"does not know are counted once ({FAST} 5, second 4); --loop-trips N ranks them") in text
    same = headline(base.model_copy(update={"candidates": [fast, second.model_copy(
        update={"unknown_loop_collectives": 5})]}))
    assert "lower bounds" not in same
