"""A program's FFTs each run under ``shard_map`` over their batch: every ``stablehlo.fft`` with a batch
dimension the mesh axes divide, wrapped in an ``sdy.manual_computation`` whose in and out shardings put
those axes on that dimension and whose body transforms the local batch.

This is what ``jax.shard_map(fft, in_specs=P(axes), out_specs=P(axes))`` lowers to, and it computes the
same values (an FFT transforms each batch element alone): the fix of an FFT that XLA's partitioner would
otherwise gather whole (some releases transform a batch-sharded FFT replicated; a transformed dimension
sharded is gathered on every release), compiled as written here rather than trusted (issue 46, jax-cfd).
A text edit: the op's own line is replaced, its location kept on the FFT inside.
"""

from __future__ import annotations

import re

# `%5 = stablehlo.fft %4, type = IRFFT, length = [256, 256] : (tensor<8x256x129xcomplex<f32>>) -> tensor<...>`
_TYPE = r"tensor<((?:[^<>]|<[^<>]*>)*)>"
_FFT = re.compile(r"^(\s*)(%[\w#]+) = stablehlo\.fft (%[\w#]+), type = (\w+), length = \[([^\]]*)\] : "
                  rf"\({_TYPE}\) -> {_TYPE}(.*)$")
_DIMS = re.compile(r"^((?:\d+x)+)")


def _dims(tensor: str) -> list[int]:
    m = _DIMS.match(tensor)
    return [int(d) for d in m.group(1).split("x") if d] if m else []


def _local(tensor: str, dim: int, parts: int) -> str:
    dims = _dims(tensor)
    dims[dim] //= parts
    return "x".join(map(str, dims)) + tensor[len(_DIMS.match(tensor).group(1)) - 1:]  # type: ignore[union-attr]


def ffts_under_shard_map(text: str, mesh_name: str, axes: list[str], parts: int) -> tuple[str, int]:
    """(the text with each FFT whose first batch dimension ``parts`` (the product of ``axes``' sizes)
    divides run under a manual computation over ``axes`` on that dimension, how many were wrapped)."""
    out: list[str] = []
    wrapped = 0
    spec_axes = ", ".join(f'"{a}"' for a in axes)
    for line in text.splitlines():
        m = _FFT.match(line)
        dims = _dims(m.group(6)) if m else []
        transformed = len([n for n in m.group(5).split(",") if n.strip()]) if m else 0
        if m is None or len(dims) <= transformed or dims[0] % parts or _dims(m.group(7))[0] != dims[0]:
            out.append(line)
            continue
        indent, result, operand, kind, length, before, after, rest = m.groups()
        spec = "[" + ", ".join([f"{{{spec_axes}}}"] + ["{}"] * (len(dims) - 1)) + "]"
        local_in, local_out = _local(before, 0, parts), _local(after, 0, parts)
        wrapped += 1
        out += [
            f"{indent}{result} = sdy.manual_computation({operand}) in_shardings=[<@{mesh_name}, {spec}>] "
            f"out_shardings=[<@{mesh_name}, {spec}>] manual_axes={{{spec_axes}}} "
            f"(%fft_batch_{wrapped}: tensor<{local_in}>) {{",
            f"{indent}  %fft_local_{wrapped} = stablehlo.fft %fft_batch_{wrapped}, type = {kind}, length = [{length}] "
            f": (tensor<{local_in}>) -> tensor<{local_out}>{rest}",
            f"{indent}  sdy.return %fft_local_{wrapped} : tensor<{local_out}>",
            f"{indent}}} : (tensor<{before}>) -> tensor<{after}>",
        ]
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), wrapped
