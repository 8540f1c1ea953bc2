"""rewrite's reports (terminal, HTML, Markdown, JSON) on one small report built here."""

from __future__ import annotations

from report_samples import (
    BREAKOUT,
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

from jax_shard_lint.passes.models.rewrite import (
    AppliedSharding,
    CollectiveChange,
    ProgramFacts,
    RewriteReport,
    RewriteRun,
    Validation,
)

TARGET = f"step {HOSTILE}"


def facts(peak: int, collective: int, seconds: float) -> ProgramFacts:
    return ProgramFacts(peak_bytes=peak, argument_bytes=MiB, output_bytes=MiB, temp_bytes=peak - 2 * MiB,
                        alias_bytes=0, collective_bytes=collective, collectives=[], outputs=[],
                        time=step_time(seconds))


def run() -> RewriteRun:
    target = RewriteReport(
        name=TARGET, platform="cpu",
        out_shardings=[AppliedSharding(path=f"result['{HOSTILE}']", index=0, before=None, after=[["data"], []],
                                       why="as its input")],
        before=facts(8 * MiB, 2 * MiB, 0.003), after=facts(6 * MiB, MiB // 2, 0.002),
        collective_changes=[CollectiveChange(change="removed", kind="all-gather", mesh_axes=["data"], shape=[1024, 256],
                                             dtype="f32", source=at(42), bytes_before=3 * MiB // 2, bytes_after=0)],
        python_fix="out_shardings=(P('data', None),)", verdict=f"The peak falls by 2.0 MiB for {HOSTILE}.",
        remaining=[f"still gathered: {HOSTILE}"],
        validation=Validation(ran=True, backend="cpu", outputs_match=True, shardings_match=True, time_before_s=0.004,
                              time_after_s=0.003))
    return RewriteRun(**HEADER, targets=[target])


def test_terminal():
    text = render_terminal("rewrite", run())
    assert_inert_terminal(text)
    for figure in ("8.0 MiB", "6.0 MiB", "512.0 KiB", "all-gather", "1.5 MiB", "train.py:42", "3 ms", "2 ms"):
        assert figure in text, figure
    assert "unknown" in text  # the earlier sharding of an output rewrite pinned


def test_json():
    out = json_round_trip("rewrite", run())
    assert out["targets"][0]["after"]["peak_bytes"] == 6 * MiB


def test_html():
    page = render_text("rewrite", "html", run())
    assert_inert_html(page)
    assert f'<section class="target" data-target="step {HOSTILE_HTML}">' in page
    assert ("<thead><tr><th></th><th>before</th><th>after</th></tr></thead><tbody>"
            "<tr><td>peak / device</td><td>8.0 MiB</td><td>6.0 MiB</td></tr>") in page
    assert "<tr><td>collectives / step</td><td>2.0 MiB</td><td>512.0 KiB</td></tr>" in page
    assert "<tr><td>est. step time (h100)</td><td>3 ms</td><td>2 ms</td></tr>" in page
    # The earlier sharding is not known (before=None): said so, not printed as Python's None.
    assert (f"<tr><td>result[&#x27;{HOSTILE_HTML}&#x27;]</td><td>unknown</td><td>P(&#x27;data&#x27;)</td>"
            "<td>as its input</td></tr>") in page
    assert ('<table class="sortable"><thead><tr><th>change</th>' in page
            and "<tr><td>removed</td><td>all-gather</td><td>data</td><td>f32[1024,256]</td><td>1.5 MiB</td>"
            "<td>0 B</td><td>train.py:42</td></tr>" in page)
    assert "median step 4.00 ms &rarr; 3.00 ms" in page


def test_markdown():
    text = render_text("rewrite", "markdown", run())
    assert_inert_markdown(text)
    assert "| peak / device | 8.0 MiB | 6.0 MiB |" in text
    assert f"The peak falls by 2.0 MiB for {HOSTILE_MARKDOWN}." in text  # the verdict, escaped
    assert "`jax.jit(..., out_shardings=(P('data', None),))`" in text
    assert "| unknown | P('data') |" in text
    assert "| collectives / step | 2.0 MiB | 512.0 KiB |" in text
    assert "| est. step time (h100) | 3 ms | 2 ms |" in text


def test_markdown_code_span_holds_the_fix_as_written():
    """python_fix is code: in a span fenced by more backticks than any run inside it, so a name holding
    backticks cannot end the span; the span is one line (a newline would end the paragraph)."""
    target = run().targets[0].model_copy(update={"python_fix": f"out_shardings={{'{BREAKOUT}': P()}}"})
    text = render_text("rewrite", "markdown", run().model_copy(update={"targets": [target]}))
    written = BREAKOUT.replace("\n", " ")
    assert f"````jax.jit(..., out_shardings={{'{written}': P()}})````" in text


def test_terminal_change_column_is_signed_as_lints_fix_figures():
    """The change column says which way each figure moved, written as lint's checked fixes write
    theirs (``peak -127.0 KiB``): a fall with '-', a rise with '+' (issue 46: a rise printed unsigned)."""
    before, after = facts(8 * MiB, 2 * MiB, 0.003), facts(6 * MiB, MiB // 2, 0.002)
    after = after.model_copy(update={"argument_bytes": 3 * MiB // 2})
    target = run().targets[0].model_copy(update={"before": before, "after": after})
    text = render_terminal("rewrite", run().model_copy(update={"targets": [target]}))
    rows = {line.split("│")[1].strip(): line.split("│")[4].strip() for line in text.splitlines()
            if line.count("│") >= 5}
    assert rows["peak / device"] == "-2.0 MiB"
    assert rows["arguments"] == "+512.0 KiB"
    assert rows["collectives / step"] == "-1.5 MiB"
    assert rows["outputs"] == ""  # unchanged: left blank


def test_long_output_paths_keep_their_tails_at_100_columns():
    """newcomer13's BERT at 100 columns: every pinned path was cut to result[0]['bert']['embeddings'... and the
    rows could not be told apart. The paths (the user's FlaxBertForMaskedLM + AdamW pytree) now lose their
    middle: each row's last keys are shown, and so is the argument they are under."""
    paths = ["result[0]['bert']['embeddings']['word_embeddings']['embedding']",
             "result[0]['bert']['embeddings']['position_embeddings']['embedding']",
             "result[1][0].mu['bert']['embeddings']['word_embeddings']['embedding']",
             "result[0]['bert']['encoder']['layer']['1']['attention']['output']['dense']['kernel']"]
    pins = [AppliedSharding(path=p, index=i, before=[[], ["model"]], after=[[], []],
                            why="the input it corresponds to, " + p.replace("result[0]", "params"))
            for i, p in enumerate(paths)]
    target = run().targets[0].model_copy(update={"out_shardings": pins})
    text = render_terminal("rewrite", run().model_copy(update={"targets": [target]}), width=100)
    rows = [line for line in text.splitlines() if line.startswith("│ result")]
    assert len(rows) == len(paths), text
    firsts = [row.split("│")[1].strip() for row in rows]
    assert len(set(firsts)) == len(paths), firsts
    assert all(f.startswith("result[") for f in firsts), firsts
    assert any(f.startswith("result[1][0].mu…") for f in firsts) and any("['kernel']" in f for f in firsts), firsts


def test_a_missing_python_change_is_said_with_why_in_every_format():
    """Outputs pinned but no text that checks (newbie19 F1: an Equinox module's text did not check, and the
    terminal said nothing): each format says there is no Python change, and why."""
    why = f"the out_shardings text did not check ({HOSTILE}); not shown"
    target = run().targets[0].model_copy(update={"python_fix": None, "python_fix_missing": why})
    missing = run().model_copy(update={"targets": [target]})
    assert "no Python change: the out_shardings text did not check" in " ".join(
        render_terminal("rewrite", missing).split())
    assert "no Python change: the out_shardings text did not check" in render_text("rewrite", "markdown", missing)
    assert "no Python change: the out_shardings text did not check" in render_text("rewrite", "html", missing)
    assert json_round_trip("rewrite", missing)["targets"][0]["python_fix_missing"] == why
