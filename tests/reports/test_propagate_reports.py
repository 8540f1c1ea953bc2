"""propagate's reports (terminal, HTML, Markdown, JSON) on one small report built here."""

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
)

from jax_shard_lint.passes.models.propagation import (
    Disagreement,
    PredictedCollective,
    PropagatedValue,
    PropagateRun,
    PropagationReport,
    ProvenanceStep,
    ShardyAgreement,
)

TARGET = f"step {HOSTILE}"


def run() -> PropagateRun:
    value = PropagatedValue(
        name="%7", shape=[1024, 256], dtype="f32", sharding=[["data"], []], bytes=MiB, per_device_bytes=MiB // 4,
        op_name="dot_general", source=at(42), seed=f"argument params['{HOSTILE}']",
        provenance=[ProvenanceStep(value="%arg0", sharding=[["data"], []], op=None, source=at(40)),
                    ProvenanceStep(value="%7", sharding=[["data"], []], op="stablehlo.dot_general", source=at(42))])
    replicated = PropagatedValue(name="%9", shape=[8], dtype="f32", sharding=[[]], bytes=32, per_device_bytes=32,
                                 op_name=None, source=None, seed=None)
    predicted = PredictedCollective(kind="all-reduce", bytes=512 * 1024, mesh_axes=["model"],
                                    op="stablehlo.dot_general", value="%7", source=at(42), matched_compiled=True,
                                    reason=f"contracting dim sharded on model ({HOSTILE})")
    agreement = ShardyAgreement(reported=4, compared=4, agreeing=3, fraction=0.75, disagreements=[
        Disagreement(value="%11", op_name=None, source=at(44), ours=[["data"]], shardy=[[]])])
    target = PropagationReport(name=TARGET, mesh={"data": 4, "model": 2}, values=[value, replicated],
                               predicted=[predicted], agreement_with_shardy=agreement)
    return PropagateRun(**HEADER, targets=[target])


def test_terminal():
    text = render_terminal("propagate", run())
    assert_inert_terminal(text)
    for figure in ("%7", "512.0 KiB", "all-reduce", "train.py:42", "256.0 KiB", "3/4 compared values (75.0%)",
                   "%11 (train.py:44): ours P('data'), Shardy P()"):
        assert figure in text, figure


def test_json():
    out = json_round_trip("propagate", run())
    assert out["targets"][0]["predicted"][0]["bytes"] == 512 * 1024


def test_html():
    page = render_text("propagate", "html", run())
    assert_inert_html(page)
    assert f'<section class="target" data-target="step {HOSTILE_HTML}"><h2>step {HOSTILE_HTML}</h2>' in page
    assert '<p data-agreement="0.75">' in page
    # Only sharded values are listed: %7 with its bytes per device, its seed and its provenance.
    assert (f'<tr><td>%7</td><td>f32[1024,256]</td><td>P(&#x27;data&#x27;)</td><td data-v="{MiB // 4}">'
            f'256.0 KiB</td><td>train.py:42</td><td>argument params[&#x27;{HOSTILE_HTML}&#x27;]</td><td><ol>') in page
    assert "<li>%7 P(&#x27;data&#x27;) via stablehlo.dot_general at train.py:42</li>" in page
    assert "<td>%9</td>" not in page
    assert ('<tr><td>all-reduce</td><td data-v="524288">512.0 KiB</td><td>model</td><td>stablehlo.dot_general</td>'
            f"<td>train.py:42</td><td>yes</td><td>contracting dim sharded on model ({HOSTILE_HTML})</td>"
            "<td></td></tr>") in page
    assert page.count('<table class="sortable">') == 2


def test_markdown():
    text = render_text("propagate", "markdown", run())
    assert_inert_markdown(text)
    assert "| all-reduce | 512.0 KiB | model | stablehlo.dot_general | train.py:42 | yes |" in text
    assert "| %7 |" in text and "| %9 |" not in text


def test_markdown_escapes_dtype_and_shape():
    """The shape cell is escaped as every other cell (brackets, as lint's Markdown writes f32\\[...\\]),
    a dtype read from a program among it."""
    value = run().targets[0].values[0].model_copy(update={"dtype": f"f32{HOSTILE}"})
    target = run().targets[0].model_copy(update={"values": [value]})
    text = render_text("propagate", "markdown", run().model_copy(update={"targets": [target]}))
    assert_inert_markdown(text)
    assert f"| %7 | f32{HOSTILE_MARKDOWN}\\[1024, 256\\] | P('data') |" in text
