"""suggest's reports (terminal, HTML, Markdown, JSON) on one small report built here."""

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
    fenced_blocks,
    json_round_trip,
    render_terminal,
    render_text,
)

from jax_shard_lint.passes.models.suggest import (
    ChosenSharding,
    ModelCost,
    PlanCheck,
    SolverStats,
    SuggestReport,
    SuggestRun,
    Version,
)

TARGET = f"step {HOSTILE}"


def version(name: str, peak: int, collective: int, seconds: float, model: float) -> Version:
    return Version(name=name, description=f"{name} layout", peak_bytes=peak, fits=True, collective_bytes=collective,
                   collective_count=2, estimated_seconds=seconds,
                   model=ModelCost(seconds=model, compute_seconds=model / 2, reduction_seconds=model / 4,
                                   reshard_seconds=model / 4))


def run() -> SuggestRun:
    weight = ChosenSharding(index=0, path=f"params['{HOSTILE}']", shape=[1024, 256], dtype="f32", current=[[], []],
                            suggested=[["data"], []], current_per_device_bytes=MiB, suggested_per_device_bytes=MiB // 4)
    plans = [PlanCheck(solve=1, objective_seconds=0.002, propagated_seconds=0.003, differing_values=2, excluded=[],
                       estimated_seconds=0.004, peak_bytes=3 * MiB),
             PlanCheck(solve=2, objective_seconds=0.0025, propagated_seconds=0.0025, differing_values=0,
                       excluded=[f"params['{HOSTILE}']: no 'model'"], estimated_seconds=0.003, peak_bytes=2 * MiB)]
    solver = SolverStats(method="ilp", variables=12, value_groups=5, ops=9,
                         objective_seconds=0.0025, lower_bound_seconds=0.002, gap=0.2, rounds=1, plans=plans, kept=2)
    target = SuggestReport(
        name=TARGET, platform="cpu", device="h100", mesh=[("data", 4), ("model", 2)], free_axes=["data", "model"],
        budget_bytes=16 * MiB, chosen="solver", arguments=[weight], results=[], solver=solver,
        versions=[version("solver", 2 * MiB, MiB // 2, 0.003, 0.0025),
                  version("written", 5 * MiB, 2 * MiB, 0.006, 0.005)],
        in_shardings_text="in_shardings=(P('data', None),)", out_shardings_text=None, placement_text=None,
        logical_rules=None, verdict=f"Use the solver's shardings for {HOSTILE}: 2.0x faster.",
        notes=[f"note {HOSTILE}"])
    return SuggestRun(**HEADER, targets=[target])


def test_terminal():
    text = render_terminal("suggest", run())
    assert_inert_terminal(text)
    for figure in ("2.0 MiB fits", "5.0 MiB fits", "512.0 KiB", "3 ms", "6 ms", "in_shardings=(P('data', None),)",
                   "P('data')"):
        assert figure in text, figure


def test_json():
    out = json_round_trip("suggest", run())
    assert [v["name"] for v in out["targets"][0]["versions"]] == ["solver", "written"]


def test_html():
    page = render_text("suggest", "html", run())
    assert_inert_html(page)
    assert f'<section class="target" data-target="step {HOSTILE_HTML}"><h2>step {HOSTILE_HTML}</h2>' in page
    # The compiled versions, the chosen one marked; the cost model's breakdown per version.
    assert ("<tr><td><b>solver (suggested)</b></td><td>2.0 MiB fits</td><td>512.0 KiB</td><td>3 ms</td>"
            "<td>2.5 ms</td><td>solver layout</td></tr>") in page
    assert "<tr><td>written</td><td>5.0 MiB fits</td><td>2.0 MiB</td><td>6 ms</td><td>5 ms</td>" in page
    assert ("<thead><tr><th>version</th><th>compute</th><th>reductions</th><th>resharding</th><th>total</th></tr>"
            "</thead><tbody><tr><td>solver</td><td>1.25 ms</td><td>625 us</td><td>625 us</td><td>2.5 ms</td></tr>"
            ) in page
    # Two solves: the plans table, the kept one starred, the exclusion escaped.
    assert "<h3>The solver's plans, checked against propagation and compiled</h3><table>" in page
    assert "<tr><td>*2</td><td>2.5 ms</td><td>2.5 ms</td><td>0</td><td>3 ms</td><td>2.0 MiB</td>" in page
    assert f"<td>params[&#x27;{HOSTILE_HTML}&#x27;]: no &#x27;model&#x27;</td>" in page
    assert "jax.jit(step, in_shardings=(P(&#x27;data&#x27;, None),))" in page
    assert f"<b>params[&#x27;{HOSTILE_HTML}&#x27;]</b> f32[1024,256]" in page and "256.0 KiB/device" in page
    assert f'<p class="muted">note: note {HOSTILE_HTML}</p></section>' in page


def test_markdown():
    text = render_text("suggest", "markdown", run())
    assert_inert_markdown(text)
    assert "| **solver** | 2.0 MiB fits | 512.0 KiB | 3 ms | 2.5 ms |" in text
    assert "| written | 5.0 MiB fits | 2.0 MiB | 6 ms | 5 ms |" in text
    assert "| params\\['" + HOSTILE_MARKDOWN + "'\\] | P() | P('data') |" in text


def test_markdown_code_blocks_hold_the_code_as_written():
    """A name with backticks cannot close the block and write Markdown (or HTML) after it: the fence is
    longer than any run of backticks in the code, so the block reads back as the code, whole."""
    code = f"in_shardings=({{'{BREAKOUT}': P('data')}},)"
    target = run().targets[0].model_copy(update={"in_shardings_text": code})
    text = render_text("suggest", "markdown", run().model_copy(update={"targets": [target]}))
    assert fenced_blocks(text) == [f"jax.jit(step, {code})"]
    assert "````python" in text  # three backticks in the name: a fence of four
