"""A MaxText-like train step compiled by XLA's TPU compiler for a v5e:2x4 slice (fixtures/hlo/tpu_v5e_maxtext.*,
written by fixtures/generate_fixtures.py from examples/maxtext_like_step.py). What the CPU fixtures never show:

- TPU splits one all-gather into start, continuation and done pieces, clones of one instruction sharing its
  channel id and result shape; a collective is counted once per channel.
- The Pallas splash attention kernel's custom call prints an attribute over three lines.
- The buffer assignment holds VMEM and SMEM allocations (colours 1, 2...) that memory_analysis() leaves out.

The oracle is the HLO text itself, read here with a few regular expressions, and XLA's memory_analysis() in
the fixture manifest."""

import json
import os
import re
from collections import defaultdict

import pytest
from conftest import FIXTURES

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.memory import stats_from_buffer_assignment
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

NAME = "tpu_v5e_maxtext"
FSDP = MeshInfo((("fsdp", 8),))
_COLLECTIVE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]\S* (all-gather|all-reduce|reduce-scatter|"
                         r"all-to-all|collective-permute)(?:-start)?\(.*?channel_id=(\d+)", re.M)
_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "s8": 1, "pred": 1}


def _text(suffix=".hlo"):
    with open(os.path.join(FIXTURES, "hlo", NAME + suffix)) as f:
        return f.read()


def _channels(text):
    """channel id -> (kind, per-device bytes of its result, the instructions that carry it)."""
    out = defaultdict(list)
    for name, dtype, dims, kind, channel in _COLLECTIVE.findall(text):
        size = _BYTES[dtype]
        for d in filter(None, dims.split(",")):
            size *= int(d)
        out[channel].append((kind, size, name))
    return out


def test_the_fixture_has_what_the_tests_are_about():
    text = _text()
    assert re.search(r'^"xprof_metadata"', text, re.M), "no instruction printed over several lines"
    assert 'custom_call_target="tpu_custom_call"' in text
    assert any(len(pieces) > 2 for pieces in _channels(text).values()), "no collective split into pieces"


def test_an_instruction_over_several_lines_parses_whole():
    module = parse_hlo_module(_text())
    kernels = [i for c in module.computations.values() for i in c.instructions
               if i.opcode == "custom-call" and i.attrs.get("custom_call_target") == '"tpu_custom_call"']
    assert kernels and all("xprof_metadata" in k.attr_text or "kernel_metadata" in k.attr_text for k in kernels)
    assert all(k.op_name and "pallas_call" in k.op_name for k in kernels)  # metadata after the break is read


def test_a_split_collective_counts_once_per_channel():
    text = _text()
    channels = _channels(text)
    found = [c for c in find_collectives(parse_hlo_module(text), FSDP).collectives if c.kind != "ragged-all-to-all"]
    with_channel = [c for c in found if any(c.hlo_name == n for pieces in channels.values() for _, _, n in pieces)]
    assert len(with_channel) == len(channels)
    assert sum(1 + len(c.pieces) for c in with_channel) == sum(len(p) for p in channels.values())
    by_name = {n: (kind, size, ch) for ch, pieces in channels.items() for kind, size, n in pieces}
    for c in with_channel:
        kind, size, channel = by_name[c.hlo_name]
        assert (c.kind, c.bytes) == (kind, size)
        assert sorted([c.hlo_name, *c.pieces]) == sorted(n for _, _, n in channels[channel])


def test_dump_memory_counts_device_memory_only():
    with open(os.path.join(FIXTURES, "hlo", "MANIFEST.json")) as f:
        manifest = json.load(f)[NAME]["memory_analysis"]
    report = _text(".buffer-assignment.txt")
    assert re.search(r"color [1-9]", report), "the fixture has no VMEM/SMEM allocation"
    stats = stats_from_buffer_assignment(report)
    assert (stats.argument_bytes, stats.output_bytes, stats.alias_bytes) == (
        manifest["argument_bytes"], manifest["output_bytes"], manifest["alias_bytes"])
    # memory_analysis() adds a scratch area of its own to the temp that the report does not list; VMEM
    # (tens of MiB here) is not in it.
    vmem = sum(int(m) for m in re.findall(r"^allocation \d+: size (\d+), color 1,", report, re.M))
    assert stats.temp_bytes <= manifest["temp_bytes"] < stats.temp_bytes + vmem
