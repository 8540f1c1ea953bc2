"""The figures against XLA, one oracle per plausible one-line bug that the rest of the suite let
through (issue 47's mutants, each named where it dies): the peak of a donated program against
memory_analysis(), a loop's compute against its known_trip_count times the FLOPs of its matmul,
``<=`` and ``!=`` loops' inferred trip counts against known_trip_count, and every collective's
per-device bytes, group size and runs per step against the compiled text (and the step time's ring
formula over them), live buffers against their instructions. Every expected number is read here
from what XLA compiled, with the regular expressions of tests/hlo_oracle.py."""

import json
import os
import re

import jax
import jax.numpy as jnp
import pytest
from conftest import FIXTURES
from hlo_oracle import ARRAY, collectives_per_step, compiled_collectives
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.cost import program_cost
from jax_shard_lint.passes.hlo.loop_bounds import inferred_trip_count
from jax_shard_lint.passes.hlo.memory import summarize_memory
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.step_time import estimate_step_time
from jax_shard_lint.passes.models.device_spec import DeviceSpec
from jax_shard_lint.passes.models.memory_stats import MemoryStats


def test_donated_program_peak_is_xlas_less_the_aliased_bytes(cli, tmp_path):
    # Kills "peak = temp + argument + output" (the alias dropped): on this program that reads
    # 4 MiB per device where XLA's accounting is 3 MiB (2 MiB of arguments + 2 MiB of outputs, 1 MiB
    # of them the donated argument's buffer).
    script = tmp_path / "donated.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
        "def shard_lint_targets():\n"
        "    m = jax.make_mesh((8,), ('x',), axis_types=(AxisType.Auto,))\n"
        "    s = jax.ShapeDtypeStruct((4096, 512), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
        "    return {'f': jax.jit(lambda a, b: (a * 2 + b, jnp.tanh(b)), donate_argnums=0).lower(s, s)}\n"
    )
    report = json.loads(cli("lint", str(script), "--format", "json", "-q", "--fail-on", "never").out)
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((4096, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    m = jax.jit(lambda a, b: (a * 2 + b, jnp.tanh(b)), donate_argnums=0).lower(s, s).compile().memory_analysis()
    assert m.alias_size_in_bytes == 4096 * 512 * 4 // 8  # the donated shard: what the oracle is about
    mem = report["targets"][0]["memory"]
    assert mem["alias_bytes"] == m.alias_size_in_bytes
    assert mem["peak_bytes"] == (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
                                 - m.alias_size_in_bytes)


# One FLOP and one byte per second: seconds are FLOPs and bytes.
_UNIT = DeviceSpec("unit", "unit", (("f32", 1.0),), 1.0, 1.0, 1.0, 0.0, 0.0)


def test_a_loops_compute_counts_every_trip():
    # Kills the step time's compute summed once per op rather than once per run of it: the loop's
    # matmul would count once where XLA runs it known_trip_count times.
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    text = jax.jit(lambda h: jax.lax.fori_loop(0, 11, lambda i, h: jnp.tanh(h @ h), h)).lower(x).compile().as_text()
    trips = [int(n) for n in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text)]
    assert trips == [11]
    estimate, _ = estimate_step_time(program_cost(parse_hlo_module(text)), [], _UNIT)
    # The loop's matmul alone: 2 x 128^3 FLOPs per trip (the oracle counts nothing else).
    assert estimate.flop_seconds == pytest.approx(trips[0] * 2 * 128**3, rel=1e-5)
    # A roofline is the larger of an op's FLOP time and its memory time, per run: the sum over the
    # step is at least either sum.
    assert estimate.compute_seconds >= max(estimate.flop_seconds, estimate.memory_seconds) * (1 - 1e-6)


def test_a_roofline_with_one_side_free_is_the_other_side_exactly():
    # Kills the compute, FLOP or memory sums weighted differently from each other (a run count added
    # rather than multiplied): with FLOPs free every op's roofline is its memory time, and with memory
    # free its FLOP time, whose total is the loop's trips x its matmul's FLOPs.
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    text = jax.jit(lambda h: jax.lax.fori_loop(0, 11, lambda i, h: jnp.tanh(h @ h), h)).lower(x).compile().as_text()
    cost = program_cost(parse_hlo_module(text))
    memory_bound, _ = estimate_step_time(cost, [], DeviceSpec("m", "m", (("f32", 1e30),), 1.0, 1.0, 1.0, 0.0, 0.0))
    assert memory_bound.compute_seconds == memory_bound.memory_seconds > 0
    flop_bound, _ = estimate_step_time(cost, [], DeviceSpec("f", "f", (("f32", 1.0),), 1e30, 1.0, 1.0, 0.0, 0.0))
    assert flop_bound.compute_seconds == flop_bound.flop_seconds == pytest.approx(11 * 2 * 128**3, rel=1e-5)


def _counted_loops():
    def le(x):  # 0, 1, ..., 9
        return jax.lax.while_loop(lambda c: c[0] <= 9, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x))[1]

    def le_step(x):  # 2, 5, ..., 20: the bound reached exactly
        return jax.lax.while_loop(lambda c: c[0] <= 20, lambda c: (c[0] + 3, jnp.sin(c[1])), (2, x))[1]

    def ne(x):  # 0, 3, 6, 9
        return jax.lax.while_loop(lambda c: c[0] != 12, lambda c: (c[0] + 3, jnp.sin(c[1])), (0, x))[1]

    return {"le": (le, "LE"), "le_step": (le_step, "LE"), "ne": (ne, "NE")}


@pytest.mark.parametrize("name", ["le", "le_step", "ne"])
def test_le_and_ne_loops_trip_counts_equal_xlas(name):
    # Kills an off-by-one on either side of a '<=' or '!=' loop's count (XLA says 10, 7, 4).
    fn, direction = _counted_loops()[name]
    text = jax.jit(fn).lower(jax.ShapeDtypeStruct((64, 64), jnp.float32)).compile().as_text()
    assert f"direction={direction}" in text  # XLA kept the comparison the test is about
    module = parse_hlo_module(text)
    loops = [i for c in module.computations.values() for i in c.instructions if i.opcode == "while"]
    known = [int(n) for n in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text)]
    assert len(loops) == len(known) == 1
    assert inferred_trip_count(module, loops[0]) == known[0]


def _collectives_program():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Explicit))

    def body(a, b):
        s = jax.lax.psum((a, b * 2), "x")  # a tuple all-reduce over groups of 2: two arrays, two sizes
        g = jax.lax.all_gather(s[0], "y", tiled=True)  # groups of 4
        r = jax.lax.psum_scatter(g, "y", scatter_dimension=0, tiled=True)
        t = jax.lax.all_to_all(r, "y", 1, 1, tiled=True)
        p = jax.lax.ppermute(t, "x", [(0, 1), (1, 0)])
        return p, s[1]

    fn = jax.shard_map(body, mesh=mesh, in_specs=(P("x", "y"), P("x", "y")), out_specs=(P("x", "y"), P("x", "y")))
    a = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    b = jax.ShapeDtypeStruct((32, 128), jnp.bfloat16, sharding=NamedSharding(mesh, P("x", "y")))
    return jax.jit(fn).lower(a, b).compile().as_text()


def test_every_collectives_bytes_and_group_size_equal_the_compiled_text():
    # Kills a wrong byte count (a tuple collective read as its largest element) and a wrong group size
    # (every collective read as spanning all devices): each instruction is compared, not a rule's verdict.
    text = _collectives_program()
    expected = compiled_collectives(text, 8)
    assert {k for k, _, _ in expected.values()} >= {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                     "collective-permute"}
    assert {n for _, _, n in expected.values()} >= {2, 4}
    assert any(len(ARRAY.findall(line)) > 1 for line in text.splitlines()
               if " all-reduce" in line and "(" in line.split("=")[1].split("all-reduce")[0])  # a tuple
    found = find_collectives(parse_hlo_module(text), MeshInfo((("x", 2), ("y", 4)))).collectives
    got = {c.hlo_name: (c.kind, c.bytes, c.group_size) for c in found}
    assert got == expected


@pytest.mark.parametrize("name", ["cpu_scan", "h100_fsdp", "tpu_v5p_scan"])
def test_live_buffers_at_the_peak_name_their_instructions_shape_and_op(name):
    # Kills a live buffer matched to the wrong instruction (an entry 'x{1}' read past its brace) or given
    # a shape it does not have (a tuple's first element, a single array's none): each buffer's shape,
    # dtype and op_name are its instruction's, read from the fixture's HLO text.
    def read(file):
        with open(os.path.join(FIXTURES, "hlo", file)) as f:
            return f.read()

    text = read(name + ".hlo")
    manifest = json.loads(read("MANIFEST.json"))[name]
    summary = summarize_memory(MemoryStats(**manifest["memory_analysis"]), manifest["platform"], parse_hlo_module(text),
                               read(name + ".live-range.txt"), read(name + ".buffer-assignment.txt"))
    assert summary.live_at_peak
    for buffer in summary.live_at_peak:
        base = buffer.name.split("{")[0]
        line = re.search(rf"^\s*(?:ROOT )?%{re.escape(base)} = (.*)$", text, re.M)
        if line is None:  # a value of no instruction of the text (h100's reduce-scatter.1.1): nothing to name
            assert (buffer.op_name, buffer.dtype, buffer.shape) == (None, None, None), buffer.name
            continue
        shape = line.group(1).split(" ")[0]
        single = re.fullmatch(r"(\w+)\[([\d,]*)\](?:\{[^}]*\})?", shape)
        op = re.search(r'op_name="((?:[^"\\]|\\.)*)"', line.group(1))  # C-escaped in the text
        assert buffer.op_name == (re.sub(r"\\(.)", r"\1", op.group(1)) if op else None), buffer.name
        if single and not shape.startswith("("):
            assert (buffer.dtype, buffer.shape) == (single.group(1), [int(d) for d in single.group(2).split(",") if d])
        else:
            assert (buffer.dtype, buffer.shape) == (None, None), buffer.name


_RING_BYTES = {  # per byte of one device's result, in a ring of n (docs/algorithms.md)
    "all-gather": lambda n: (n - 1) / n, "reduce-scatter": lambda n: n - 1, "all-reduce": lambda n: 2 * (n - 1) / n,
    "all-to-all": lambda n: (n - 1) / n, "collective-permute": lambda n: 1,
}


def test_step_time_communication_is_the_ring_over_xlas_bytes_and_groups():
    # Kills collective seconds summed into the wrong bucket (within/across hosts, sync/async), the
    # slowest-first order reversed, and sync communication taken off the step rather than added:
    # each collective's seconds are the ring formula over its bytes and group in the compiled text.
    text = _collectives_program()
    assert "-start(" not in text  # the CPU runs these collectives synchronously
    found = find_collectives(parse_hlo_module(text), MeshInfo((("x", 2), ("y", 4)))).collectives
    estimate, timed = estimate_step_time(program_cost(parse_hlo_module(text)), found, _UNIT)
    compiled = compiled_collectives(text, 8)
    expected = {name: _RING_BYTES[kind](n) * nbytes for name, (kind, nbytes, n) in compiled.items()}
    assert {c.hlo_name: c.seconds for c in timed} == pytest.approx(expected, rel=1e-5)
    assert [c.seconds for c in timed] == sorted((c.seconds for c in timed), reverse=True)
    total = sum(expected.values())
    assert estimate.communication_seconds == estimate.within_host_seconds == pytest.approx(total, rel=1e-5)
    assert (estimate.across_hosts_seconds, estimate.async_communication_seconds) == (0, 0)
    assert estimate.seconds == pytest.approx(estimate.compute_seconds + total, rel=1e-5)
    assert estimate.serial_seconds == pytest.approx(estimate.compute_seconds + total, rel=1e-5)


@pytest.mark.parametrize("name", ["cpu_fsdp", "cpu_scan", "h100_fsdp", "h100_scan"])
def test_fixture_collectives_bytes_groups_and_runs_equal_the_text(name):
    # Kills an async start's bookkeeping tuple read as its result, and a loop's collectives counted
    # once: every collective of XLA's CPU and H100 compiles (async starts on the GPU, loops in the
    # scans) against the text, runs per step from the loops' known_trip_count.
    with open(os.path.join(FIXTURES, "hlo", name + ".hlo")) as f:
        text = f.read()
    module = parse_hlo_module(text)
    expected = collectives_per_step(text, module.num_partitions)
    assert expected
    found = find_collectives(module, None).collectives
    assert {c.hlo_name: (c.kind, c.bytes, c.group_size, c.count) for c in found} == expected
