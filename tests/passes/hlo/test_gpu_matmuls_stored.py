"""gpu_matmuls (the forms XLA gives a matmul) asked about every instruction of the stored texts: the pairs compiled
for 8 compile-only H100 devices (fixtures/hlo/meaning-h100: Triton gemm fusions, split-K, cuBLAS calls) and the
small CPU programs (fixtures/hlo/meaning: plain dots, YNNPACK fusions of a dot, attention's softmax sums). No
compile.

The oracle is the text, read with regular expressions (never the tool's parser): a matmul is a ``dot`` or
``convolution``, a custom-call to cuBLAS, or a fusion whose body holds exactly one dot; split-K's sum is a fusion
of a reduce that JAX's name stack names for a ``dot_general`` (XLA emitted it for the matmul it cut), on a
matmul's result; a multi-output fusion's element is computed from the body's parameters its ROOT tuple's operand
reaches."""

import glob
import os
import re

import pytest
from stored_hlo import LINE, MEANING, MEANING_H100, computations, instructions, releases

from jax_shard_lint.passes.hlo.gpu_matmuls import matmul_holder, split_k_partials, tuple_element_parameters
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

_CUBLAS = re.compile(r'custom_call_target="__cublas\$(gemm|lt\$matmul)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _stored():
    for folder in (MEANING_H100, MEANING):
        for release in releases(folder):
            for path in sorted(glob.glob(os.path.join(folder, release, "*.hlo"))):
                yield pytest.param(path, id=f"{os.path.basename(folder)}/{release}/{os.path.basename(path)[:-4]}")


STORED = list(_stored())


def _read(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text, computations(text), parse_hlo_module(text)


def _body(comps, rest):
    called = re.search(r"calls=%([\w.\-]+)", rest)
    return comps[called.group(1)] if called else []


def _opcode(line):
    return LINE.match(line).group(3)


def _is_matmul(comps, opcode, rest):
    """XLA's text shows a matmul: a dot or convolution, a cuBLAS call, a fusion of exactly one dot."""
    if opcode in ("dot", "convolution") or (opcode == "custom-call" and _CUBLAS.search(rest)):
        return True
    return opcode == "fusion" and sum(_opcode(line) in ("dot", "convolution") for line in _body(comps, rest)) == 1


@pytest.mark.parametrize("path", STORED)
def test_a_matmul_holder_is_every_op_the_text_shows_as_a_matmul_and_a_cublas_result(path):
    """Each entry op: itself where the text shows a matmul (a plain dot on CPU, a cuBLAS call, a fusion of one
    dot); for the get-tuple-element taking a cuBLAS call's first element, the call; None for anything else."""
    text, comps, module = _read(path)
    entry = instructions(comps["ENTRY"])
    for name, (_, opcode, operands, rest) in entry.items():
        expected = name if _is_matmul(comps, opcode, rest) else None
        if opcode == "get-tuple-element" and re.search(r"\bindex=0\b", rest):
            _, called, _, called_rest = entry[operands[0]]
            expected = operands[0] if called == "custom-call" and _CUBLAS.search(called_rest) else None
        found = matmul_holder(module, module.instruction(name))
        assert (found.name if found is not None else None) == expected, name
    if "meaning-h100" in path:
        forms = {_opcode(line) for line in comps["ENTRY"] if _is_matmul(comps, _opcode(line), LINE.match(line)[5])}
        assert forms == ({"custom-call"} if path.endswith(".cublas.hlo") else {"fusion"})


@pytest.mark.parametrize("path", STORED)
def test_split_k_sums_are_the_fusions_whose_reduce_xla_named_for_a_matmul(path):
    """split_k_partials gives the matmul's result exactly for a fusion of one reduce that JAX's name stack names
    dot_general, on a matmul; None for every other entry fusion (CPU's softmax sums among them: a reduce_sum of
    a matmul's scores, which YNNPACK's fusion takes with its initial value as a second operand)."""
    text, comps, module = _read(path)
    entry = instructions(comps["ENTRY"])
    split = 0
    for name, (_, opcode, operands, rest) in entry.items():
        if opcode != "fusion":
            continue
        reduces = [line for line in _body(comps, rest) if _opcode(line) == "reduce"]
        # XLA names a split-K reduce for its matmul: JAX's name stack (a forward dot_general) or, for a backward
        # matmul whose reduce carries the transpose's name, the reducer XLA makes for it (dot.N.reduce_sub_...).
        for_matmul = [line for line in reduces if (_OP_NAME.search(line)
                      and _OP_NAME.search(line).group(1).endswith("/dot_general"))
                      or re.search(r"to_apply=%dot\.\d+\.reduce_sub_computation", line)]
        matmul_result = bool(operands) and _is_matmul(comps, *entry[operands[0]][1:2], entry[operands[0]][3])
        if operands and entry[operands[0]][1] == "get-tuple-element":
            _, inner, _, inner_rest = entry[entry[operands[0]][2][0]]
            matmul_result = inner == "custom-call" and bool(_CUBLAS.search(inner_rest))
        expected = operands[0] if reduces == for_matmul != [] and matmul_result else None
        split += expected is not None
        assert split_k_partials(module, module.instruction(name)) == expected, name
    # Split-K where Triton's gemms cut a small matmul (gathered_between_pair's down, both of narrowing_pair's);
    # cuBLAS and CPU never cut one.
    name = os.path.basename(path)
    # nnx_transformer's backward matmuls too (the whole step stored).
    assert (split > 0) == ("meaning-h100" in path and name in ("gathered_between_pair.hlo", "narrowing_pair.hlo",
                                                               "nnx_transformer.hlo"))


_PARAMETER = re.compile(r"^\s*%([\w.\-]+) = \S+ parameter\((\d+)\)")


def _parameters_reached(lines, start):
    """The parameter numbers of a fusion body that its instruction ``start`` is computed from."""
    body, numbers = instructions(lines), dict(m.groups() for m in map(_PARAMETER.match, lines) if m)
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen and name in body:
            seen.add(name)
            todo.extend(body[name][2])
    return {int(numbers[n]) for n in seen if n in numbers}


@pytest.mark.parametrize("path", STORED)
def test_a_fusions_element_is_computed_from_the_parameters_its_root_tuple_reads(path):
    """Each entry fusion, each element: None where the body's ROOT is no tuple of that many (a fusion of one
    output); for a multi-output fusion (GPU's q, k, v slices of one matmul's result), the body's parameters the
    element's operand of the ROOT tuple reaches."""
    text, comps, module = _read(path)
    multi = 0
    for name, (_, opcode, _, rest) in instructions(comps["ENTRY"]).items():
        if opcode != "fusion":
            continue
        lines = _body(comps, rest)
        [(_, root_opcode, root_operands, _)] = instructions([line for line in lines if " ROOT " in f" {line}"]).values()
        for element in range(len(root_operands) + 2):
            expected = None
            if root_opcode == "tuple" and element < len(root_operands):
                multi += 1
                expected = _parameters_reached(lines, root_operands[element])
            assert tuple_element_parameters(module, module.instruction(name), element) == expected, (name, element)
    # Multi-output fusions: combined_sums' and nnx_transformer's whole step on H100 (both releases), attention's
    # q, k, v slices on jax 0.12's cuBLAS.
    name = os.path.basename(path)
    assert (multi > 0) == ("meaning-h100" in path and (name.startswith("combined_sums") or name == "nnx_transformer.hlo"
                                                       or ("jax-0.12" in path and name == "attention_pair.cublas.hlo")))
