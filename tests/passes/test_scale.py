"""The passes that had to become linear, checked for their results (never their
time): the scale benchmark's transformer step at two layers, the memory
timeline against a brute-force union of live slices at every step, the parser
against a line-by-line reading, and propagate's report against Shardy."""

import json
import os

from conftest import FIXTURES, ROOT

from jax_shard_lint.passes.hlo.memory import _timeline, parse_buffer_values, parse_live_range_report
from jax_shard_lint.passes.hlo.parser import parse_hlo_module, parse_instruction

SCALE = os.path.join(ROOT, "benchmarks", "scale_transformer.py")


def fixture(name, suffix):
    with open(os.path.join(FIXTURES, "hlo", f"{name}{suffix}")) as f:
        return f.read()


def brute_force_timeline(report, slices):
    """Bytes live at every step: the union of live slices, step by step."""
    last = max(max(end for _, _, end in report.ranges), report.sequence_length - 1)
    out = []
    for step in range(last + 1):
        live = {slices[n] for n, start, end in report.ranges if n in slices and start <= step <= end}
        total = 0
        for alloc in {a for a, _, _ in live}:
            covered, reach = 0, -1
            for lo, hi in sorted((o, o + s) for a, o, s in live if a == alloc):
                if hi > reach:
                    covered += hi - max(lo, reach)
                    reach = hi
            total += covered
        out.append(total)
    return out


def test_the_collector_is_paused_for_the_analysis_and_restored():
    import gc

    from jax_shard_lint.analyzer.backend.heap import paused_collector

    assert gc.isenabled()
    with paused_collector():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_timeline_sweep_equals_brute_force():
    for name in ("cpu_fsdp", "cpu_scan", "h100_fsdp", "h100_scan"):
        report = parse_live_range_report(fixture(name, ".live-range.txt"))
        slices = parse_buffer_values(fixture(name, ".buffer-assignment.txt"))
        expected = brute_force_timeline(report, slices)
        got = _timeline(report, slices)
        assert got, name
        for point in got:
            assert point.bytes == expected[point.step], (name, point.step)


def test_parser_reads_every_instruction_line():
    for name in ("cpu_fsdp", "h100_fsdp", "h100_scan"):
        text = fixture(name, ".hlo")
        module = parse_hlo_module(text)
        lines = [ln for ln in text.splitlines() if ln.startswith("  ") and " = " in ln]
        parsed = {i.name: i for c in module.computations.values() for i in c.instructions}
        for line in lines:
            one = parse_instruction(line)
            assert parsed[one.name].opcode == one.opcode
            assert parsed[one.name].operands == one.operands
        # Operands name instructions of the module (or are literal numbers: parameter(0), constant(1)).
        for ins in parsed.values():
            for op in ins.operands:
                assert op in parsed or op.replace(".", "").replace("-", "").isdigit() or ins.opcode in (
                    "constant", "parameter", "get-tuple-element", "iota"), (ins.name, op)


def test_scale_step_lint_and_propagate_at_two_layers(cli):
    lint = cli("lint", SCALE, "--set", "layers=2", "--set", "vocab=4096", "--set", "seq=128", "--set", "batch=16",
               "--format", "json", "-q", "--fail-on", "never")
    assert lint.code == 0, lint.err[-2000:]
    target = json.loads(lint.out)["targets"][0]
    memory = target["memory"]
    at_peak = {p["step"]: p["bytes"] for p in memory["timeline"]}[memory["peak_step"]]
    assert at_peak == memory["live_range_peak_bytes"]  # XLA's live-range figure at XLA's peak step
    # Layers unrolled, no loop: our matmul FLOP count and XLA's cost_analysis() agree.
    assert abs(target["time"]["flops"] / target["time"]["xla_flops"] - 1) < 0.01
    prop = cli("propagate", SCALE, "--set", "layers=2", "--set", "vocab=4096", "--set", "seq=128",
               "--set", "batch=16", "--format", "json", "-q")
    assert prop.code == 0, prop.err[-2000:]
    report = json.loads(prop.out)["targets"][0]
    agreement = report["agreement_with_shardy"]
    assert agreement["compared"] > 500 and agreement["agreeing"] == agreement["compared"]
    assert len(report["values"]) == 200 and report["values_omitted"] > 0
    assert all(v["provenance"] == [] for v in report["values"])
    explained = cli("propagate", SCALE, "--set", "layers=2", "--set", "vocab=4096", "--set", "seq=128",
                    "--set", "batch=16", "--format", "json", "-q", "--no-compile", "--explain", "result[0]['embed']")
    values = json.loads(explained.out)["targets"][0]["values"]
    assert any(v["provenance"] for v in values)
