"""device_slices (where a device cuts its own part of a value, told apart from a bias cut to its part) asked about
every instruction of the stored texts: the small CPU programs (fixtures/hlo/meaning), whose partitioned ops read
``partition-id`` and cut with ``dynamic-slice``, the pairs compiled for compile-only H100 devices
(fixtures/hlo/meaning-h100), and fsdp_tp's H100 step (fixtures/compiled), whose fusions slice a bitcast of their
parameter. No compile.

The oracle is the text, read with the regular expressions of tests/stored_hlo.py (never the tool's parser): an
op's operands and opcode, a fusion's body (the computation ``calls=`` names), the elements of a result's shape
(its dimensions' product; none for a tuple), a body's ``parameter(k)`` and the bitcasts and reshapes of it that
a dynamic slice cuts."""

import glob
import os
import re
from functools import cache
from math import prod

import pytest
from stored_hlo import (
    COMPILED,
    MEANING,
    MEANING_H100,
    called_instructions,
    computations,
    instructions,
    releases,
    stored_text,
)

from jax_shard_lint.passes.hlo.device_slices import (
    cut_at_device_offset,
    cuts_own_size,
    fusion_body,
    reads_partition_id,
    sliced_parameters,
)
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CALLS = re.compile(r"\bcalls=%([\w.\-]+)")
_ARRAY = re.compile(r"^\w+\[([\d,]*)\]")
_PARAMETER = re.compile(r"^\s*%([\w.\-]+) = \S+ parameter\((\d+)\)")


def _stored():
    for folder in (MEANING, MEANING_H100):
        for release in releases(folder):
            for path in sorted(glob.glob(os.path.join(folder, release, "*.hlo"))):
                yield pytest.param(path, id=f"{os.path.basename(folder)}/{release}/{os.path.basename(path)[:-4]}")


STORED = list(_stored())
# fsdp_tp's step compiled for H100 (fixtures/compiled): fusions that dynamic-slice a bitcast of their parameter.
H100_STEPS = [pytest.param(os.path.join(COMPILED, r, "fsdp-tp.h100.hlo.gz"), id=f"compiled/{r}/fsdp-tp.h100")
              for r in releases(COMPILED)]


@cache  # each text parsed once for the tests that ask it (parsing is most of their time)
def _read(path):
    text = stored_text(path)
    comps = computations(text)
    ops = called_instructions(comps)
    return comps, ops, parse_hlo_module(text)


def _elements(shape):
    array = _ARRAY.match(shape)
    return prod(int(d) for d in array.group(1).split(",") if d) if array else None


def _body(comps, opcode, rest):
    called = _CALLS.search(rest) if opcode == "fusion" else None
    return instructions(comps[called.group(1)]) if called else {}


@pytest.mark.parametrize("path", STORED)
def test_a_cut_at_the_device_offset_reads_partition_id_and_cuts_a_slice_of_its_results_size(path):
    """Every instruction: its body is the computation ``calls=`` names where it is a fusion (none for any other
    op); it reads partition-id where an operand is one; it cuts its own size where it is a dynamic slice or a
    fusion holding one of at least its result's elements (any, for a result of several arrays); it cuts at the
    device's offset where it reads partition-id and holds no dynamic slice or one of its own size."""
    comps, ops, module = _read(path)
    counts = {"reads": 0, "cut": 0, "bias": 0}
    for name, (shape, opcode, operands, rest) in ops.items():
        ins = module.instruction(name)
        body = _body(comps, opcode, rest)
        slices = [s for s, o, _, _ in body.values() if o == "dynamic-slice"]
        out = _elements(shape)
        own = opcode == "dynamic-slice" or any(out is None or _elements(s) >= out for s in slices)
        reads = any(ops[o][1] == "partition-id" for o in operands if o in ops)
        assert [i.name for i in fusion_body(module, ins)] == list(body), name
        assert reads_partition_id(module, ins) == reads, name
        assert cuts_own_size(module, ins) == own, name
        assert cut_at_device_offset(module, ins) == (reads and (not slices or own)), name
        counts["reads"] += reads
        counts["cut"] += reads and bool(slices) and own
        counts["bias"] += reads and bool(slices) and not own
    if "meaning-h100" not in path and os.path.basename(path) in ("nnx_transformer.hlo", "head_on_both_axes.hlo"):
        # CPU's partitioned ops: nnx_transformer's bias cut to the model axis's features and its embedding's rows
        # cut at the offset; head_on_both_axes's weight cut by its offset.
        assert counts["reads"] > 0 and counts["cut"] + counts["bias"] > 0


@pytest.mark.parametrize("path", STORED + H100_STEPS)
def test_a_fusions_sliced_parameters_are_the_ones_a_dynamic_slice_cuts_behind_bitcasts(path):
    """Each fusion's body: the numbers of its parameters that a dynamic slice's first operand is, directly or
    through bitcasts and reshapes of one operand; none where it slices nothing."""
    comps, ops, module = _read(path)
    behind = 0
    for name, (_, opcode, _, rest) in ops.items():
        called = _CALLS.search(rest)
        if opcode != "fusion" or not called:
            continue
        numbers = {m.group(1): int(m.group(2)) for m in map(_PARAMETER.match, comps[called.group(1)]) if m}
        body = instructions(comps[called.group(1)])
        expected = set()
        for _, inner_opcode, inner_operands, _ in body.values():
            if inner_opcode != "dynamic-slice" or not inner_operands:
                continue
            at = inner_operands[0]
            while at in body and body[at][1] in ("bitcast", "reshape") and len(body[at][2]) == 1:
                at = body[at][2][0]
            if at in numbers:
                expected.add(numbers[at])
                behind += at != inner_operands[0]
        assert sliced_parameters(list(module.computations[called.group(1)].instructions)) == expected, name
    if path.endswith("fsdp-tp.h100.hlo.gz"):
        assert behind > 0  # a parameter cut behind its bitcast
