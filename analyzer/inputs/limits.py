"""Limits checked on a file's text before native code parses it.

MLIR's parser and XLA abort the process (not raise) on some input a user can
write: a tensor type whose element count overflows 64 bits aborts with
``BadStatusOrAccess``, and 20,000 nested regions overflow the parser's stack.
One linear scan of the text finds both first and names the line.
"""

from __future__ import annotations

import re

from ..errors import ShardLintInputError

# 2^48 elements: 1 PiB of bf16, far past any device, far below int64 overflow.
MAX_TENSOR_ELEMENTS = 1 << 48
# MLIR nests a region per op with a body; real programs stay under 100 levels.
MAX_NESTING = 1000
# Devices jax-shard-lint makes for one module: `--devices`, `mhlo.num_partitions`, a mesh.
MAX_DEVICES = 4096

_TENSOR = re.compile(r"tensor<((?:\d+|\?)(?:x(?:\d+|\?))*)x[a-zA-Z!]")
_BRACES = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}]')


def check_mlir_text(path: str, text: str) -> None:
    for m in _TENSOR.finditer(text):
        elements = 1
        for dim in m.group(1).split("x"):
            if dim != "?":
                elements *= int(dim)
        if elements > MAX_TENSOR_ELEMENTS:
            line = text.count("\n", 0, m.start()) + 1
            end = text.find(">", m.end())
            raise ShardLintInputError(
                path, f"{text[m.start():end + 1 if end >= 0 else m.end()]} at line {line} has more than 2^48 elements")
    # Braces in string attributes (an HLO sharding "{devices=[2]0,1}") are skipped whole.
    depth = deepest = 0
    first_too_deep = None
    for m in _BRACES.finditer(text):
        token = m.group(0)
        if token == "{":
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_NESTING and first_too_deep is None:
                first_too_deep = m.start()
        elif token == "}":
            depth -= 1
    if first_too_deep is not None:
        line = text.count("\n", 0, first_too_deep) + 1
        raise ShardLintInputError(path, f"braces nested {deepest} deep (more than {MAX_NESTING}) at line {line}")


def check_device_count(where: str, needed: int) -> None:
    if needed > MAX_DEVICES:
        raise ShardLintInputError(
            where, f"needs {needed} devices, more than the {MAX_DEVICES} jax-shard-lint makes for a module")
