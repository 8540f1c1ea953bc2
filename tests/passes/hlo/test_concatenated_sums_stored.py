"""concatenated_sums (GPU's combined all-reduce: values flattened, concatenated into one buffer, summed, sliced back
out) asked about every instruction of the stored texts: the H100 pairs and whole steps (fixtures/hlo/meaning-h100,
fixtures/compiled's *.h100: wrapped concatenates of two to thirteen values, a reduce fused with its concatenate),
and the small CPU programs (fixtures/hlo/meaning: concatenates a transpose or bitcast reads). No compile.

The oracle is the text, read with the regular expressions of tests/stored_hlo.py (never the tool's parser): an
op's one operand is a concatenate of several values, or a fusion whose body is only its parameters and one
concatenate of them in their order; each value is the concatenate's operand behind the bitcasts and reshapes
that flattened it; its offset is the elements of the values before it; the slices back out are the sum's (or
its done op's) users that are, or fuse only, a slice ``slice={[a:b]}``."""

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

from jax_shard_lint.passes.hlo.concatenated_sums import (
    concatenated_values,
    offsets,
    slices_back,
    summed_values,
)
from jax_shard_lint.passes.hlo.module import HloInstruction
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CALLS = re.compile(r"\bcalls=%([\w.\-]+)")
_PARAMETER = re.compile(r"^\s*%([\w.\-]+) = \S+ parameter\((\d+)\)")
_ARRAY = re.compile(r"\w+\[([\d,]*)\]")
_SLICE = re.compile(r"\bslice=\{\[(\d+):\d+\]\}")
_SUMS = {"all-reduce", "all-reduce-start", "reduce-scatter"}


def _stored():
    for folder in (MEANING_H100, MEANING):
        for release in releases(folder):
            for path in sorted(glob.glob(os.path.join(folder, release, "*.hlo"))):
                yield pytest.param(path, id=f"{os.path.basename(folder)}/{release}/{os.path.basename(path)[:-4]}")
    for release in releases(COMPILED):
        for path in sorted(glob.glob(os.path.join(COMPILED, release, "*.h100.hlo.gz"))):
            yield pytest.param(path, id=f"compiled/{release}/{os.path.basename(path)[:-7]}")


STORED = list(_stored())


@cache  # each text parsed once for the tests that ask it (parsing is most of their time)
def _read(path):
    text = stored_text(path)
    comps = computations(text)
    ops = called_instructions(comps)
    return comps, ops, parse_hlo_module(text)


def _concatenated(comps, ops, name):
    """The values the op ``name`` concatenates in the text, in order; None where it is no concatenate of
    several (or no fusion of only one concatenate of its parameters in their order)."""
    _, opcode, operands, rest = ops[name]
    if len(operands) < 2:
        return None
    if opcode == "fusion":
        lines = comps[_CALLS.search(rest).group(1)]
        body = instructions(lines)
        numbers = {m.group(1): int(m.group(2)) for m in map(_PARAMETER.match, lines) if m}
        cats = [v for v in body.values() if v[1] == "concatenate"]
        if len(cats) != 1 or {v[1] for v in body.values()} - {"parameter", "concatenate"} \
                or [numbers.get(o) for o in cats[0][2]] != list(range(len(operands))):
            return None
    elif opcode != "concatenate":
        return None
    values = []
    for value in operands:
        while value in ops and ops[value][1] in ("bitcast", "reshape") and len(ops[value][2]) == 1:
            value = ops[value][2][0]
        values.append(value)
    return values


def _elements(shape):
    first = _ARRAY.search(shape)
    return prod(int(d) for d in first.group(1).split(",") if d)


@pytest.mark.parametrize("path", STORED)
def test_the_values_an_op_concatenates_behind_their_flattening_and_their_offsets(path):
    """Every op of one operand: the values that operand concatenates (each behind the bitcasts and reshapes of
    one operand that flattened it), and each one's offset in the buffer; None for an op of several operands or
    whose operand is no concatenate of several values. A sum's summed values: those, or its own operands."""
    comps, ops, module = _read(path)
    found = 0
    for name, (_, opcode, operands, _) in ops.items():
        ins = module.instruction(name)
        expected = _concatenated(comps, ops, operands[0]) if len(operands) == 1 and operands[0] in ops else None
        assert concatenated_values(module, ins) == expected, name
        assert concatenated_values(None, ins) is None
        if expected is not None:
            found += 1
            sizes = [_elements(ops[v][0]) for v in ops[operands[0]][2]]
            assert offsets(module, ins) == [sum(sizes[:k]) for k in range(len(sizes))], name
        if opcode in _SUMS:
            assert summed_values(module, ins) == (expected or operands), name
    name = os.path.basename(path)
    # Concatenates read by one op: H100's combined sums, the steps' stacked weights, CPU's and H100's transposes
    # of attention's heads.
    assert (found > 0) == (name.startswith(("nnx_transformer", "fsdp-tp", "llama", "reshards_a_weight"))
                           or ("meaning-h100" in path and name.startswith(("combined_sums", "attention_pair")))), found


@pytest.mark.parametrize("path", STORED)
def test_a_sum_of_any_instruction_adds_the_values_it_concatenates(path):
    """Every instruction asked as the one operand of an all-reduce (the question a sum asks of its operand): the
    values it concatenates, where the text shows a concatenate of several or a fusion of only one concatenate of
    its parameters in order; None for any other, reshards_a_weight's result among them (CPU fuses its concatenate
    of four parameters in order with a transpose and copy, so the buffer does not hold them back to back)."""
    comps, ops, module = _read(path)
    moved = 0
    for name, (shape, opcode, operands, rest) in ops.items():
        expected = _concatenated(comps, ops, name)
        reader = HloInstruction(f"sum.of.{name}", "all-reduce", shape, (name,), "to_apply=%add")
        assert concatenated_values(module, reader) == expected, name
        if opcode == "fusion" and expected is None and len(operands) > 1:
            lines = comps[_CALLS.search(rest).group(1)]
            numbers = {m.group(1): int(m.group(2)) for m in map(_PARAMETER.match, lines) if m}
            moved += any(v[1] == "concatenate" and [numbers.get(o) for o in v[2]] == list(range(len(operands)))
                         for v in instructions(lines).values())
    assert (moved > 0) == (os.path.basename(path) == "reshards_a_weight.hlo")


@pytest.mark.parametrize("path", STORED)
def test_the_slices_back_out_of_a_sum_are_its_results_users_that_slice_it(path):
    """Each all-reduce (its done op's users for an async one) and reduce-scatter: its result's users that are a
    slice, or a fusion of one slice and its parameters, by the slice's start; none for the others."""
    comps, ops, module = _read(path)
    users = module.users()
    readers = {}
    for name, (_, _, operands, _) in ops.items():
        for o in operands:
            readers.setdefault(o, []).append(name)
    sliced = 0
    for name, (_, opcode, _, _) in ops.items():
        if opcode not in _SUMS:
            continue
        result = next((u for u in readers.get(name, ()) if ops[u][1].endswith("-done")), name)
        expected = {}
        for user in readers.get(result, ()):
            _, user_opcode, _, rest = ops[user]
            body = [v for v in instructions(comps[_CALLS.search(rest).group(1)]).values()
                    if v[1] != "parameter"] if user_opcode == "fusion" else [ops[user]]
            start = _SLICE.search(body[0][3]) if len(body) == 1 and body[0][1] == "slice" else None
            if start:
                expected[int(start.group(1))] = user
        sliced += len(expected)
        assert {k: u.name for k, u in slices_back(module, module.instruction(name), users).items()} == expected, name
    if os.path.basename(path).startswith("combined_sums") and "meaning-h100" in path:
        assert sliced == 4  # the four values summed in one buffer, each sliced back out
