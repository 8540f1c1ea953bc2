"""value_origin (which entry parameter a value is) asked directly about the stored texts' instructions where the
answer can be read off the text: a fusion that cuts each device's part of an argument at partition-id's offset,
and tuples, which hold several values and so are no one weight. No compile.

The oracle is the text, read with the regular expressions of tests/stored_hlo.py (never the tool's parser): a
fusion's operands (partition-id among them), its body's ops, its ROOT ``dynamic-slice`` of ``parameter(k)``, and
the entry ``parameter(n)`` its operand k is."""

import glob
import os
import re
from functools import cache

import pytest
from stored_hlo import COMPILED, MEANING, called_instructions, computations, dims, instructions, releases, stored_text

from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.value_origin import (
    device_slice_parameter,
    origin_index,
    weight_parameter,
)

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CALLS = re.compile(r"\bcalls=%([\w.\-]+)")
_PARAMETER = re.compile(r"^\s*%([\w.\-]+) = \S+ parameter\((\d+)\)")
_ROOT = re.compile(r"^\s*ROOT %([\w.\-]+) ")
# What a fusion cutting a device's part holds: the slice, its offset's arithmetic (partition-id times the part's
# size), the argument.
_CUTTING = {"parameter", "constant", "convert", "multiply", "partition-id", "dynamic-slice"}

MEANING_TEXTS = [pytest.param(p, id=f"{os.path.basename(os.path.dirname(p))}/{os.path.basename(p)[:-4]}")
                 for r in releases(MEANING) for p in sorted(glob.glob(os.path.join(MEANING, r, "*.hlo")))]
# llama's step compiled for TPU v5e (fixtures/compiled): tuples whose first element is one layer a fusion slices
# out of a stacked argument.
TPU_STEPS = [pytest.param(os.path.join(COMPILED, r, "llama-512.tpu-v5e.hlo.gz"), id=f"compiled/{r}/llama-512.tpu-v5e")
             for r in releases(COMPILED)]


@cache  # each text parsed once for the tests that ask it (parsing is most of their time)
def _read(path):
    text = stored_text(path)
    comps = computations(text)
    ops = called_instructions(comps)
    module = parse_hlo_module(text)
    return comps, ops, module, origin_index(module)


@pytest.mark.parametrize("path", MEANING_TEXTS)
def test_a_fusion_cutting_its_devices_part_of_an_argument_at_partition_ids_offset_is_that_argument(path):
    """Each entry fusion of the CPU programs: where it reads partition-id, holds only the slice and its offset's
    arithmetic, and its ROOT dynamic-slices its parameter k, which is the entry parameter n: (n, every dimension
    of the cut); None for a fusion that reads no partition-id, in its operands or its body."""
    comps, ops, module, index = _read(path)
    entry = {m.group(1): int(m.group(2)) for m in map(_PARAMETER.match, comps["ENTRY"]) if m}
    cut = 0
    for name, (shape, opcode, operands, rest) in instructions(comps["ENTRY"]).items():
        if opcode != "fusion":
            continue
        lines = comps[_CALLS.search(rest).group(1)]
        body = instructions(lines)
        numbers = {m.group(1): int(m.group(2)) for m in map(_PARAMETER.match, lines) if m}
        [root] = [_ROOT.match(line).group(1) for line in lines if _ROOT.match(line)]
        reads = any(ops[o][1] == "partition-id" for o in operands) or any(v[1] == "partition-id"
                                                                         for v in body.values())
        found = device_slice_parameter(module, name, index, tuple(range(len(dims(shape)))))
        if not reads:
            assert found is None, name
            continue
        _, root_opcode, root_operands, _ = body[root]
        if {v[1] for v in body.values()} <= _CUTTING and root_opcode == "dynamic-slice" \
                and root_operands[0] in numbers and operands[numbers[root_operands[0]]] in entry:
            cut += 1
            assert found == (entry[operands[numbers[root_operands[0]]]], tuple(range(len(dims(shape))))), name
    if os.path.basename(path) == "contracts_both_axes.hlo":
        assert cut == 1  # the activation h, cut to the part of the contracted dimension this device's w holds


@pytest.mark.parametrize("path", TPU_STEPS + MEANING_TEXTS)
def test_a_tuple_is_no_weight(path):
    """Every tuple, llama's tuples of one layer sliced out of a stacked argument among them: it holds several
    values, so it is no one entry parameter."""
    comps, ops, module, index = _read(path)
    for name, (_, opcode, _, _) in ops.items():
        if opcode == "tuple":
            assert weight_parameter(module, name, index) is None, name

