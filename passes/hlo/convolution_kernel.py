"""A convolution's kernel, read in the compiled HLO: which of its dimensions the convolution
contracts, and which kernel argument a collective XLA emitted for a convolution serves.

A dot names its contracted dimensions (``lhs_contracting_dims``); a convolution names every
dimension of its operands by role in ``dim_labels`` (``b01f_01io->b01f``: the input's batch,
spatial and feature dimensions, the kernel's spatial window, input and output features). The
kernel's window (the digits) and its input features (``i``) are summed over: a kernel sharded on
either leaves partial sums, or has XLA split each window between devices and trade the input's
rows a neighbour's half reads (a ViT's patch embedding with its kernel sharded on its height:
collective-permutes of the images, issue 46).

Those collectives read no kernel: their operand is the image, and the convolution they feed is
reached through the fusion that stitches the traded rows to the device's own. What ties them to
the convolution is JAX's name stack, which XLA keeps in every op it emits for one primitive: the
collective carries the convolution's ``op_name`` (its backward pass's, ``transpose(jvp(...))``, for
the convolutions that compute the gradients). The convolution of the forward pass with that name
is read for its kernel operand, when exactly one convolution has it.
"""

from __future__ import annotations

import re

from .module import HloInstruction, HloModule
from .value_origin import OriginIndex, weight_parameter

_LABELS = re.compile(r"^(\w+)_(\w+)->(\w+)$")
# JAX's reverse-mode autodiff wraps the forward pass's name stack: ``transpose(jvp(Module))/layer/op``.
_BACKWARD = re.compile(r"transpose\((jvp\([^/]*\))\)")
KERNEL_POSITION = 1  # conv_general_dilated's rhs: JAX always passes the kernel second


def convolution_contracting(conv: HloInstruction, position: int) -> tuple[int, ...] | None:
    """The operand's dimensions the convolution sums over: the kernel's window and input features, the
    input's features (its window dimensions slide, each output reads a few of them); None without
    ``dim_labels``."""
    m = _LABELS.match(conv.attrs.get("dim_labels", ""))
    if m is None or position not in (0, 1):
        return None
    if position == KERNEL_POSITION:
        return tuple(d for d, ch in enumerate(m.group(2)) if ch.isdigit() or ch == "i")
    return tuple(d for d, ch in enumerate(m.group(1)) if ch == "f")


def forward_name(op_name: str) -> str:
    """The forward pass's name of an op the backward pass emitted for it (the name itself otherwise)."""
    return _BACKWARD.sub(r"\1", op_name)


def named_convolution(module: HloModule, op_name: str | None, index: OriginIndex
                      ) -> tuple[HloInstruction, str] | None:
    """The forward convolution whose name stack the op carries, and its kernel operand as the enclosing
    computation's value (a fusion body's parameter becomes the fusion's operand): the one convolution
    with that name and a kernel that is an entry parameter, else None (two convolutions one name
    stack leaves, a layer called twice, are not told apart by a guess)."""
    if not op_name or not op_name.endswith("conv_general_dilated"):
        return None
    found = _kernels_by_name(module, index).get(forward_name(op_name), [])
    return found[0] if len(found) == 1 else None


def _kernels_by_name(module: HloModule, index: OriginIndex) -> dict[str, list[tuple[HloInstruction, str]]]:
    """op_name -> the convolutions with that name whose kernel is an entry parameter, with that kernel
    operand; built once per module (a convolutional network's every collective asks)."""
    hit: dict[str, list[tuple[HloInstruction, str]]] | None = module.derived.get("convolution_kernels")
    if hit is not None:
        return hit
    hit = module.derived["convolution_kernels"] = {}
    for comp in module.computations.values():
        for conv in comp.instructions:
            if conv.opcode != "convolution" or not conv.op_name or len(conv.operands) <= KERNEL_POSITION:
                continue
            kernel = conv.operands[KERNEL_POSITION]
            callers = index.fusions_of.get(comp.name, [])
            if len(callers) == 1:
                kernel = _outer(module, callers[0], kernel)
            if weight_parameter(module, kernel, index) is not None:
                hit.setdefault(conv.op_name, []).append((conv, kernel))
    return hit


def _outer(module: HloModule, fusion: HloInstruction, name: str) -> str:
    ins = module.instruction(name)
    if ins is None or ins.opcode != "parameter" or not ins.operands or not ins.operands[0].isdigit():
        return name
    k = int(ins.operands[0])
    return fusion.operands[k] if k < len(fusion.operands) else name
