"""fused_matmuls (a fusion's body, the matmuls an op computes, a body parameter as the fusion's operand, the op a
sum adds) asked about every instruction of the stored texts: the small CPU programs (fixtures/hlo/meaning), the
pairs compiled for compile-only H100 devices (fixtures/hlo/meaning-h100), and one TPU step
(fixtures/compiled), where XLA chains more layout ops than the walk goes through. No compile.

The oracle is the text, read with the regular expressions of tests/stored_hlo.py (never the tool's parser): a
fusion's body is the computation its ``calls=`` names (a reduce's ``to_apply=``, a loop's ``condition=`` and
``body=`` are no body), a matmul is a ``dot`` or ``convolution``, a body's ``parameter(k)`` is the fusion's
operand k, and a sum's producer is its operand back through at most four layout ops to the first that is no
layout op or holds a matmul."""

import glob
import os
import re
from functools import cache

import pytest
from stored_hlo import COMPILED, LINE, MEANING, MEANING_H100, compiled_text, computations, instructions, releases

from jax_shard_lint.passes.hlo.fused_matmuls import fusion_body, matmuls_in, outer_operand, summed_producer
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CALLS = re.compile(r"\bcalls=%([\w.\-]+)")
_PARAMETER = re.compile(r"^\s*%([\w.\-]+) = \S+ parameter\((\d+)\)")
# The ops between a matmul and its sum that only lay the sum out (the docstring's layout ops): bitcasts,
# reshapes, copies (async ones too), converts, and an async gather's done op, which hands on its start's result.
_LAYOUT = {"bitcast", "reshape", "copy", "copy-start", "copy-done", "convert", "all-gather-done"}
_SUMS = {"all-reduce", "all-reduce-start", "reduce-scatter"}


def _stored():
    for folder in (MEANING, MEANING_H100):
        for release in releases(folder):
            for path in sorted(glob.glob(os.path.join(folder, release, "*.hlo"))):
                yield pytest.param(path, id=f"{os.path.basename(folder)}/{release}/{os.path.basename(path)[:-4]}")


STORED = list(_stored())


@cache  # each text parsed once for the tests that ask it (parsing is most of their time)
def _read(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text, computations(text), parse_hlo_module(text)


def _every_instruction(comps):
    return {n: v for name, lines in comps.items() if name != "ENTRY" for n, v in instructions(lines).items()}


def _body_names(comps, rest):
    called = _CALLS.search(rest)
    return list(instructions(comps[called.group(1)])) if called else []


def _holds_matmul(comps, opcode, rest):
    return opcode in ("dot", "convolution") or (
        opcode == "fusion" and any(LINE.match(line).group(3) in ("dot", "convolution")
                                   for line in comps[_CALLS.search(rest).group(1)]))


def _producer(ops, comps, name, steps=4):
    """The sum's operand ``name`` back through at most ``steps`` layout ops, to the first op that holds a matmul
    or lays nothing out."""
    for _ in range(steps):
        _, opcode, operands, rest = ops[name]
        if _holds_matmul(comps, opcode, rest) or opcode not in _LAYOUT or not operands:
            break
        name = operands[0]
    return name


@pytest.mark.parametrize("path", STORED)
def test_a_fusions_body_is_the_computation_its_calls_names_and_its_matmuls_its_dots(path):
    """Every instruction: its body is the instructions of the computation ``calls=`` names (none for a reduce,
    an all-reduce or a sort, whose reducer or comparator is ``to_apply=``, or a loop); its matmuls itself where it
    is a dot or convolution, its body's dots and convolutions where it is a fusion, none otherwise."""
    _, comps, module = _read(path)
    for name, (_, opcode, _, rest) in _every_instruction(comps).items():
        ins = module.instruction(name)
        body = _body_names(comps, rest)
        assert [i.name for i in fusion_body(module, ins)] == body, name
        expected = [name] if opcode in ("dot", "convolution") else [
            n for n in body if instructions(comps[_CALLS.search(rest).group(1)])[n][1] in ("dot", "convolution")
        ] if opcode == "fusion" else []
        assert [i.name for i in matmuls_in(module, ins)] == expected, name


@pytest.mark.parametrize("path", STORED)
def test_a_fusion_parameter_is_the_fusions_operand_of_its_number(path):
    """Each fusion, each parameter of its body: the fusion's operand k for ``parameter(k)``; any other body
    instruction, and every name asked outside a fusion, is itself."""
    _, comps, module = _read(path)
    ops = _every_instruction(comps)
    for name, (_, opcode, operands, rest) in ops.items():
        if opcode != "fusion":
            assert outer_operand(module, None, name) == name
            continue
        fusion = module.instruction(name)
        for line in comps[_CALLS.search(rest).group(1)]:
            inner = LINE.match(line).group(1)
            number = _PARAMETER.match(line)
            expected = operands[int(number.group(2))] if number else inner
            assert outer_operand(module, fusion, inner) == expected, (name, inner)


@pytest.mark.parametrize("path", STORED)
def test_a_sums_producer_is_its_operand_behind_the_layout_ops(path):
    """Each all-reduce and reduce-scatter: the op its operand is, back through the layout ops XLA left
    between it and the matmul whose partial sums it adds (attention_pair's bitcast of the output projection's
    dot on CPU)."""
    _, comps, module = _read(path)
    ops = _every_instruction(comps)
    for name, (_, opcode, operands, _) in ops.items():
        if opcode in _SUMS and operands:
            assert summed_producer(module, module.instruction(name)).name == _producer(ops, comps, operands[0]), name


@pytest.mark.parametrize("release", releases(COMPILED))
def test_the_walk_to_a_sums_producer_stops_after_four_layout_ops(release):
    """Asked of every op of the stored maxtext_like_scan TPU step (v5p), whose first operand XLA computes
    through up to seven layout ops in a row (copies, bitcasts, converts): the walk goes back through four at
    most, and stops sooner at a matmul or any other op."""
    text = compiled_text(release, "maxtext-like-scan.tpu-v5p")
    comps = computations(text)
    module = parse_hlo_module(text)
    ops = _every_instruction(comps)
    longest = 0
    for name, (_, _, operands, _) in ops.items():
        if not operands or operands[0] not in ops:
            continue
        assert summed_producer(module, module.instruction(name)).name == _producer(ops, comps, operands[0]), name
        chain, at = 0, operands[0]
        while ops[at][1] in _LAYOUT and ops[at][2]:
            chain, at = chain + 1, ops[at][2][0]
        longest = max(longest, chain)
    assert longest >= 5  # chains the bound cuts
