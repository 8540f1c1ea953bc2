"""lint, run and check's reports (reports/findings/: terminal, HTML, SARIF, Markdown; JSON) on one small
report built here: its figures, names, findings and fixes read back, hostile names inert."""

from __future__ import annotations

import json
import re

import pytest
from report_samples import (
    HEADER,
    HOSTILE,
    HOSTILE_HTML,
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

from jax_shard_lint.passes.models.fix_check import FixCheck, FixVerdict
from jax_shard_lint.passes.models.per_member_copy import PerMemberCopy
from jax_shard_lint.passes.models.process_runs import MultiProcessReport, ProcessCountRun, ProcessFigures
from jax_shard_lint.passes.models.report import (
    Collective,
    Finding,
    LintReport,
    LiveBuffer,
    MemorySummary,
    MemoryTimelinePoint,
    RuleDoc,
    ScriptRun,
    Severity,
    TargetReport,
    TensorInfo,
)

COMMANDS = ("lint", "run", "check")
TARGET = f"step {HOSTILE}"


def report(command: str = "lint") -> LintReport:
    memory = MemorySummary(
        platform="cpu", peak_bytes=3 * MiB + MiB // 2, argument_bytes=MiB, output_bytes=MiB // 2, temp_bytes=2 * MiB,
        alias_bytes=0, budget_bytes=16 * MiB, live_range_peak_bytes=3 * MiB, peak_step=2,
        live_at_peak=[LiveBuffer(name="fusion.3", bytes=2 * MiB, shape=[512, 1024], dtype="f32", op_name=HOSTILE,
                                 source=at(40)),
                      LiveBuffer(name="wrapped_broadcast.2", bytes=MiB, shape=[4, 256, 256], dtype="f32",
                                 op_name="jit(step)/transpose(jvp(vmap(solve)))", source=at(41),
                                 per_member_copy=PerMemberCopy(members=4, dims=[0], parameters=[
                                     f"params['{HOSTILE}']", f"opt_state[0].mu['{HOSTILE}']"]))],
        timeline=[MemoryTimelinePoint(step=0, bytes=MiB), MemoryTimelinePoint(step=2, bytes=3 * MiB),
                  MemoryTimelinePoint(step=4, bytes=MiB)])
    gather = Collective(kind="all-gather", bytes=256 * 1024, count=3, mesh_axes=["data"], shape=[256, 256],
                        dtype="f32", op_name=f"jit(step)/{HOSTILE}", source=at(42), hlo_name="all-gather.7",
                        computation="main", group_size=4, intent="parameter-gather", seconds=0.002)
    finding = Finding(rule="SL101", name="weight-gathered-every-step", severity=Severity.warning,
                      message=f"params['{HOSTILE}'] is gathered 3 times per step", source=at(42),
                      fix="P('data', None)", count=2, bytes=768 * 1024, ops=["all-gather.7", "all-gather.9"],
                      parameter=f"params['{HOSTILE}']", parameter_sharding=[["data"], []],
                      suggested_sharding=[[], ["data"]], provenance=[f"argument params['{HOSTILE}'] P('data', None)"])
    weight = TensorInfo(index=0, path=f"params['{HOSTILE}']", shape=[1024, 256], dtype="f32",
                        sharding=[["data"], []], bytes=MiB, per_device_bytes=MiB // 4)
    target = TargetReport(name=TARGET, platform="cpu", num_devices=8, mesh={"data": 4, "model": 2}, memory=memory,
                          collectives=[gather], inputs=[weight], outputs=[], findings=[finding],
                          time=step_time(0.004), warnings=[f"warned {HOSTILE}"])
    run = ScriptRun(exit_code=0, error=None, programs_compiled=2, programs_reported=1) if command == "run" else None
    unused = Finding(rule="SL001", name="unused-suppression", severity=Severity.info, message=f"unused {HOSTILE}",
                     source=at(7))
    return LintReport(**HEADER, command=command, targets=[target], findings=[unused], run=run,
                      rules=[RuleDoc(code="SL101", name="weight-gathered-every-step", severity=Severity.warning,
                                     summary="a weight is all-gathered every step", doc=f"doc of SL101 {HOSTILE}")])


@pytest.mark.parametrize("command", COMMANDS)
def test_terminal(command):
    text = render_terminal(command, report(command))
    assert_inert_terminal(text)
    for figure in ("3.5 MiB", "256.0 KiB", "all-gather", "train.py:42", "SL101", "P('data', None)", "SL001",
                   "1 target(s), 2 finding(s)"):
        assert figure in text, figure
    assert ("exited cleanly; 2 programs compiled, 1 reported" in text) == (command == "run")
    # The buffer that is a parameter once per member of a vmap, said so (the optimizer state that mirrors it
    # not named), and the advice under the table.
    assert f"4 x params['{HOSTILE}']'s per-device shape (a per-member copy from vmap)" in " ".join(text.split())
    assert "1 buffer live at the peak (1.0 MiB) holds a parameter's" in " ".join(text.split())
    # The advice reads as a paragraph under the table: left-justified, not centred (newbie19b F10).
    [advice] = [line for line in text.splitlines() if "live at the peak (1.0 MiB)" in line]
    assert advice.startswith("1 buffer live at the peak"), advice


def test_run_with_processes_terminal_names_each_process_count():
    figures = [ProcessFigures(process=p, exit_code=0, programs_compiled=1, programs=["step"],
                              collective_bytes=(p + 1) * MiB, peak_host_bytes=100 * MiB, peak_device_bytes=3 * MiB)
               for p in range(2)]
    multi = MultiProcessReport(**report("run").model_dump(), process_runs=[ProcessCountRun(
        processes=2, devices_per_process=4, error=None, wall_seconds=1.5, exit_code=0, per_process=figures)])
    text = render_terminal("run", multi)
    assert_inert_terminal(text)
    assert "2.0 MiB" in text and "100.0 MiB" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_json(command):
    out = json_round_trip(command, report(command))
    assert out["command"] == command and out["targets"][0]["name"] == TARGET
    assert out["targets"][0]["memory"]["peak_bytes"] == 3 * MiB + MiB // 2


@pytest.mark.parametrize("command", COMMANDS)
def test_html(command):
    page = render_text(command, "html", report(command))
    assert page.startswith("<!DOCTYPE html>")
    assert_inert_html(page)
    assert f'<section class="target" data-target="step {HOSTILE_HTML}"><h2>step {HOSTILE_HTML}</h2>' in page
    assert f'data-peak-bytes="{3 * MiB + MiB // 2}">3.5 MiB</span>' in page
    assert ("<th>what it is</th><th>source</th>" in page
            and f"<td>4 x params[&#x27;{HOSTILE_HTML}&#x27;]&#x27;s per-device shape (a per-member copy from vmap)"
                "</td>" in page)
    assert "1 buffer live at the peak (1.0 MiB) holds a parameter&#x27;s per-device shape" in page
    # The collectives table: bytes, count and per step, each sortable by its number; the op escaped.
    assert ('<td data-v="262144">256.0 KiB</td><td data-v="3">3</td><td data-v="786432">768.0 KiB</td>'
            '<td data-v="0.002">2 ms</td><td>data</td><td>parameter-gather</td>') in page
    # The op as the terminal shows it (cut at its last '/', escaped), XLA's whole op name as its hover text.
    assert f'<td class="op" title="jit(step)/{HOSTILE_HTML}">script&gt;[bold]pwn[/bold]</td>' in page
    # Per source line, and the buffers live at the peak (the op as its hover text).
    assert '<tr><td>train.py:42</td><td data-v="1">1</td><td data-v="786432">768.0 KiB</td><td>all-gather</td></tr>' \
        in page
    assert f'<td data-v="{2 * MiB}">2.0 MiB</td><td>f32[512,1024]</td>' in page
    assert f'title="{HOSTILE_HTML}"' in page
    assert re.search(r'<table class="sortable collectives"><thead><tr><th>kind</th><th>bytes</th>', page)
    # The finding, its fix and the run's own findings in a section of their own.
    assert f"params[&#x27;{HOSTILE_HTML}&#x27;] is gathered 3 times per step" in page
    assert "fix: <code>P(&#x27;data&#x27;, None)</code>" in page
    assert '<section class="target"><h3>Findings</h3>' in page and f"unused {HOSTILE_HTML}" in page


@pytest.mark.parametrize("command", COMMANDS)
def test_sarif(command):
    sarif = json.loads(render_text(command, "sarif", report(command)))
    assert sarif["version"] == "2.1.0"
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["SL101", "SL001"]
    first = results[0]
    assert first["level"] == "warning"
    assert first["message"]["text"] == f"params['{HOSTILE}'] is gathered 3 times per step Fix: P('data', None)"
    assert first["properties"]["target"] == TARGET and first["properties"]["count"] == 2
    location = first["locations"][0]["physicalLocation"]
    assert location["region"]["startLine"] == 42 and location["artifactLocation"]["uri"].endswith("train.py")
    assert sarif["runs"][0]["tool"]["driver"]["rules"][0]["id"] == "SL101"


def _uri_base_ids(node) -> set[str]:
    if isinstance(node, dict):
        found = {node["uriBaseId"]} if isinstance(node.get("uriBaseId"), str) else set()
        return found.union(*(_uri_base_ids(v) for k, v in node.items() if k != "originalUriBaseIds"))
    if isinstance(node, list):
        return set().union(*(_uri_base_ids(v) for v in node))
    return set()


def test_sarif_declares_every_uri_base_id_it_uses():
    """SARIF 2.1.0 §3.14.14: a uriBaseId a location names is declared in the run's originalUriBaseIds (a
    library line's SITE_PACKAGES as well as the checkout's %SRCROOT%)."""
    lint = report("lint")
    through = lint.targets[0].findings[0].model_copy(update={"via": at(287, "flax/linen/linear.py")})
    lint = lint.model_copy(update={"targets": [lint.targets[0].model_copy(update={"findings": [through]})]})
    sarif = json.loads(render_text("lint", "sarif", lint))
    [run] = sarif["runs"]
    used = _uri_base_ids(run)
    assert used == {"%SRCROOT%", "SITE_PACKAGES"}
    assert used <= set(run["originalUriBaseIds"])
    related = run["results"][0]["relatedLocations"][0]["physicalLocation"]["artifactLocation"]
    assert related == {"uri": "flax/linen/linear.py", "uriBaseId": "SITE_PACKAGES"}


@pytest.mark.parametrize("command", COMMANDS)
def test_markdown(command):
    text = render_text(command, "markdown", report(command))
    assert_inert_markdown(text)
    assert text.startswith("### jax-shard-lint: 2 finding(s)")
    assert "| 3.5 MiB | 16.0 MiB | 768.0 KiB | ~4 ms (nominal) | 1 warning |" in text or \
        "| 3.5 MiB | 16.0 MiB | 768.0 KiB | ~4 ms | 1 warning |" in text
    assert "| warning | SL101 weight-gathered-every-step |" in text and "| train.py:42 |" in text
    assert r"P('data', None)" in text


def test_a_fix_two_findings_share_is_printed_once_and_json_keeps_both():
    """SL201 and SL203 of one state value answered by one move (the main example's embedding table and its two
    moments): the fix is printed in full on the first finding; the second refers to it by rule and line. The
    JSON and SARIF keep each finding's whole fix."""
    model = report()
    move = ("shard params['embed'], opt_state['mu']['embed'] and opt_state['nu']['embed'] as P('tp') instead of "
            "P(), and return them in that layout (out_shardings=) (checked: peak -704.0 MiB)")
    base = model.targets[0].findings[0]
    shared = [base.model_copy(update={"rule": "SL201", "source": at(48), "fix": move}),
              base.model_copy(update={"rule": "SL203", "source": at(35), "fix": move})]
    model = model.model_copy(update={"targets": [model.targets[0].model_copy(update={"findings": shared})]})
    text = " ".join(render_terminal("lint", model).split())
    assert text.count("as P('tp') instead of P()") == 1
    assert "fix: the same as SL201's fix at train.py:48 above" in text
    markdown = render_text("lint", "markdown", model)
    assert markdown.count("as P('tp') instead of P()") == 1 and "the same as SL201's fix at train.py:48" in markdown
    assert [f["fix"] for f in json_round_trip("lint", model)["targets"][0]["findings"]] == [move, move]


def test_a_checked_change_two_findings_share_is_printed_once():
    """suggest's whole-step version printed as the fix of an SL103 and an SL105, each text naming its own weight
    first: the same change measured to the same figures, printed in full once; the JSON keeps both texts."""
    model = report()
    check = FixCheck(change="w1, w2, batch -> P('data') (fsdp)", verdict=FixVerdict.better,
                     peak_bytes_before=8 * MiB, peak_bytes_after=6 * MiB, traffic_bytes_before=4 * MiB,
                     traffic_bytes_after=MiB)
    tail = (", and 2 other arguments as that version does (suggest's fsdp version: state split on its largest "
            "dimension over data, other arguments on dimension 0): the best of the layouts tried (checked: ...)")
    base = model.targets[0].findings[0]
    fixes = [f"shard w1 as P('data') instead of P('model'){tail}", f"shard w2 as P('data') instead of P(){tail}"]
    shared = [base.model_copy(update={"rule": rule, "source": at(line), "fix": fix, "fix_check": check})
              for rule, line, fix in (("SL103", 30, fixes[0]), ("SL105", 31, fixes[1]))]
    model = model.model_copy(update={"targets": [model.targets[0].model_copy(update={"findings": shared})]})
    text = " ".join(render_terminal("lint", model).split())
    assert text.count("suggest's fsdp version") == 1 and "fix: the same as SL103's fix at train.py:30 above" in text
    assert [f["fix"] for f in json_round_trip("lint", model)["targets"][0]["findings"]] == fixes
