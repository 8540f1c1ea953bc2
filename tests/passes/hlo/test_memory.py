"""The memory pass against XLA's own numbers: the peak is temp + argument +
output - alias from memory_analysis(), and what is live at the peak comes from
XLA's live-range report."""

import json
import os

import jax
import jax.numpy as jnp
from conftest import FIXTURES
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.hlo.memory import parse_live_range_report, summarize_memory
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.models.memory_stats import MemoryStats


def fixture(name, suffix):
    with open(os.path.join(FIXTURES, "hlo", f"{name}{suffix}")) as f:
        return f.read()


def test_peak_and_live_buffers_from_fixture_reports():
    manifest = json.loads(fixture("MANIFEST", ".json"))
    for name in ("cpu_scan", "h100_fsdp", "tpu_v5p_fsdp", "tpu_v5p_scan"):
        xla = manifest[name]["memory_analysis"]
        stats = MemoryStats(**xla)
        summary = summarize_memory(
            stats, manifest[name]["platform"], parse_hlo_module(fixture(name, ".hlo")),
            fixture(name, ".live-range.txt"), fixture(name, ".buffer-assignment.txt"), budget_bytes=10**9,
        )
        assert summary.peak_bytes == (xla["temp_bytes"] + xla["argument_bytes"] + xla["output_bytes"]
                                      - xla["alias_bytes"])
        assert summary.headroom_bytes == 10**9 - summary.peak_bytes
        report = parse_live_range_report(fixture(name, ".live-range.txt"))
        assert sum(b.bytes for b in summary.live_at_peak) == report.peak_bytes
        assert summary.live_at_peak == sorted(summary.live_at_peak, key=lambda b: (-b.bytes, b.name))
        # At XLA's peak step, the timeline counts exactly the bytes XLA lists as live. Not on
        # TPU: buffers in other memory spaces (S(1), sparse-core tiles) are sized differently in
        # the live-range report (2 MiB) and in the buffer assignment (1 MiB for copy-start.2{0}).
        if not name.startswith("tpu"):
            at_peak = {p.step: p.bytes for p in summary.timeline}[summary.peak_step]
            assert at_peak == report.peak_bytes


def test_cpu_scan_live_range_peak_is_xlas():
    # "Stack trace breakdown for peak usage: 753 692 bytes" in the report XLA wrote.
    report = parse_live_range_report(fixture("cpu_scan", ".live-range.txt"))
    text = fixture("cpu_scan", ".live-range.txt")
    total = int(text.split("Stack trace breakdown for peak usage: ")[1].split(" bytes")[0].replace(" ", ""))
    assert report.peak_bytes == total


def test_lint_peak_matches_a_bare_compile(cli, tmp_path):
    script = tmp_path / "peak.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
        "def shard_lint_targets():\n"
        "    m = jax.make_mesh((8,), ('x',), axis_types=(AxisType.Auto,))\n"
        "    s = jax.ShapeDtypeStruct((4096, 512), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
        "    return {'f': jax.jit(lambda a: jnp.tanh(a) @ a.T).lower(s)}\n"
    )
    report = json.loads(cli("lint", str(script), "--format", "json", "-q").out)
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((4096, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    m = jax.jit(lambda a: jnp.tanh(a) @ a.T).lower(s).compile().memory_analysis()
    mem = report["targets"][0]["memory"]
    assert mem["peak_bytes"] == (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
                                 - m.alias_size_in_bytes)
    assert (mem["temp_bytes"], mem["argument_bytes"], mem["output_bytes"]) == (
        m.temp_size_in_bytes, m.argument_size_in_bytes, m.output_size_in_bytes)
