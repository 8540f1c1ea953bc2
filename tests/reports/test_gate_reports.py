"""gate's reports (terminal, Markdown, JSON) on one small result built here."""

from __future__ import annotations

from report_samples import (
    HOSTILE,
    HOSTILE_MARKDOWN,
    MiB,
    assert_inert_markdown,
    assert_inert_terminal,
    json_round_trip,
    render_terminal,
    render_text,
)

from jax_shard_lint.passes.models.gate import GateResult, GateRow, GateThresholds

TARGET = f"step {HOSTILE}"


def result(passed: bool = False) -> GateResult:
    rows = [GateRow(target=TARGET, metric="peak / device", before=4 * MiB, after=5 * MiB, ratio=1.25,
                    alert=None if passed else "peak +25.0% > 2%"),
            GateRow(target=TARGET, metric="estimated step time", before=0.002, after=0.002, ratio=1.0)]
    return GateResult(baseline=f"shard_lint/{HOSTILE}", passed=passed, thresholds=GateThresholds(), rows=rows,
                      compiler_change=None if passed else "jaxlib 0.0.1 -> 0.0.2", rebaselined=False)


def test_terminal():
    text = render_terminal("gate", result())
    assert_inert_terminal(text)
    for figure in ("4.0 MiB", "5.0 MiB", "1.250x", "peak +25.0% > 2%", "2 ms"):
        assert figure in text, figure


def test_json():
    out = json_round_trip("gate", result())
    assert out["passed"] is False and out["rows"][0]["after"] == 5 * MiB


def test_markdown():
    text = render_text("gate", "markdown", result())
    assert_inert_markdown(text)
    assert text.startswith("### jax-shard-lint gate: failed, across compiler releases")
    assert f"| step {HOSTILE_MARKDOWN} | peak / device | 4.0 MiB | 5.0 MiB | 1.250x | **peak +25.0% &gt; 2%** |" in text
    assert "| estimated step time | 2 ms | 2 ms | 1.000x |  |" in text
    assert "limits: peak +2%, collective bytes +5%, estimated step time +5%, new all-gather or all-to-all over " \
        "1.0 MiB." in text
    assert render_text("gate", "markdown", result(passed=True)).startswith("### jax-shard-lint gate: passed")
