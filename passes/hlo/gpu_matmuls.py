"""The forms XLA's GPU compiler gives a matmul, read as the matmul they compute: what the tensor-parallel
pair walk (tensor_parallel_pairs) asks of a matmul (its two operands, as values of the computation that
holds it) whatever the form.

- a cuBLAS call: ``custom-call`` to ``__cublas$gemm`` or ``__cublas$lt$matmul``, its result the first
  element of a tuple (a workspace beside it) that a ``get-tuple-element`` takes;
- a Triton gemm fusion (``kind=kCustom``) whose dot reads its operands through a prologue fused into it
  (the bitcasts of a layout, an activation such as the tanh between a pair's halves) and whose root may
  apply an epilogue (the tanh after the up projection);
- XLA's horizontal fusion of matmuls that share an input (a gated MLP's gate and up projections, attention's
  q, k and v): the weights concatenated side by side (inside the gemm fusion or in a loop fusion before it),
  one matmul computed, and its result sliced apart by the elementwise fusion after it;
- split-K: at small sizes the contracted dimension cut into slices, one batched matmul of the slices, then a
  loop fusion that adds them (a reduce over that batch dimension).

Operand identity only: each step is one instruction or one fusion body looked at once (linear in the module).
"""

from __future__ import annotations

from .fused_matmuls import MATMUL, fusion_body
from .module import HloInstruction, HloModule

_CUBLAS_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")
# Ops between a gemm fusion's parameter and its dot that keep the elements as they are (a weight's way).
_LAYOUT = frozenset({"bitcast", "reshape", "copy", "convert", "transpose"})
# Single-input elementwise ops XLA fuses into a gemm as its prologue (an activation before the down projection).
_PROLOGUE = _LAYOUT | {"tanh", "logistic", "exponential", "negate", "abs", "sqrt", "rsqrt", "sine", "cosine"}
_MAX_STEPS = 16


def is_cublas_call(ins: HloInstruction | None) -> bool:
    return ins is not None and ins.opcode == "custom-call" and ins.attrs.get(
        "custom_call_target", "").strip('"') in _CUBLAS_TARGETS


def matmul_holder(module: HloModule, ins: HloInstruction | None) -> HloInstruction | None:
    """The op whose result ``ins`` is as a matmul's: ``ins`` itself (a dot, a fusion holding exactly one, a
    cuBLAS call) or the cuBLAS call whose result tuple's first element ``ins`` takes; None for anything else."""
    if ins is None:
        return None
    if ins.opcode == "get-tuple-element" and len(ins.operands) == 1 and ins.attrs.get("index") == "0":
        call = module.instruction(ins.operands[0])
        return call if is_cublas_call(call) else None
    if ins.opcode in MATMUL or is_cublas_call(ins):
        return ins
    if ins.opcode == "fusion" and sum(i.opcode in MATMUL for i in fusion_body(module, ins)) == 1:
        return ins
    return None


def _to_parameter(module: HloModule, name: str) -> tuple[list[int], bool] | None:
    """The fusion parameters (by number) a dot's operand inside a gemm fusion is: one, through the prologue's
    single-input ops, or several side by side (a concatenate of them: horizontally fused weights); and whether
    only layout ops lie between. None where it is computed from anything else."""
    layout_only = True
    for _ in range(_MAX_STEPS):
        ins = module.instruction(name)
        if ins is None:
            return None
        if ins.opcode == "parameter":
            return ([int(ins.operands[0])], layout_only) if ins.operands and ins.operands[0].isdigit() else None
        if ins.opcode == "concatenate":
            parts = [module.instruction(o) for o in ins.operands]
            if not parts or any(p is None or p.opcode != "parameter" or not p.operands or not p.operands[0].isdigit()
                                for p in parts):
                return None
            return [int(p.operands[0]) for p in parts if p is not None], layout_only
        if ins.opcode not in _PROLOGUE or len(ins.operands) != 1:
            return None
        layout_only = layout_only and ins.opcode in _LAYOUT
        name = ins.operands[0]
    return None


def concatenated(module: HloModule, name: str) -> list[str]:
    """The values a matmul operand places side by side (a loop fusion of one concatenate of its parameters, as
    XLA fuses q, k and v's weights for one matmul), or ``[name]`` for any other value."""
    ins = module.instruction(name)
    if ins is None or ins.opcode != "fusion":
        return [name]
    body = fusion_body(module, ins)
    roots = [i for i in body if i.is_root]
    if len(roots) != 1 or roots[0].opcode != "concatenate" or any(
            i.opcode not in ("parameter", "concatenate") for i in body):
        return [name]
    found = _to_parameter(module, roots[0].name)
    if found is None or any(k >= len(ins.operands) for k in found[0]):
        return [name]
    return [ins.operands[k] for k in found[0]]


def matmul_operands(module: HloModule, holder: HloInstruction) -> list[tuple[list[str], bool]] | None:
    """The matmul's two operands (lhs, rhs) as values of the computation that holds ``holder`` (a
    ``matmul_holder``): each the value or values (weights fused side by side) it reads, and whether only
    layout ops lie between (a weight's way; an activation fused into a gemm's prologue is not). An operand the
    fusion computes otherwise is named as the body's value (whose walk goes on inside the body)."""
    if holder.opcode in MATMUL or is_cublas_call(holder):
        if len(holder.operands) < 2:
            return None
        return [(concatenated(module, o), True) for o in holder.operands[:2]]
    if holder.opcode != "fusion":
        return None
    dots = [i for i in fusion_body(module, holder) if i.opcode in MATMUL]
    if len(dots) != 1 or len(dots[0].operands) < 2:
        return None
    sides: list[tuple[list[str], bool]] = []
    for operand in dots[0].operands[:2]:
        found = _to_parameter(module, operand)
        if found is None or any(k >= len(holder.operands) for k in found[0]):
            sides.append(([operand], True))  # a value the fusion computes (a layer sliced out): as it is named
            continue
        numbers, layout_only = found
        names = [holder.operands[k] for k in numbers]
        sides.append((concatenated(module, names[0]) if len(names) == 1 else names, layout_only))
    return sides


def split_k_partials(module: HloModule, ins: HloInstruction | None) -> str | None:
    """The operand of a loop fusion that only adds its one operand's slices along one dimension (the sum
    after a split-K matmul: XLA's GPU compiler cuts a small matmul's contracted dimension into a batch
    dimension and reduces it), when that operand is a matmul's result; None otherwise."""
    if ins is None or ins.opcode != "fusion" or len(ins.operands) != 1:
        return None
    body = fusion_body(module, ins)
    reduces = [i for i in body if i.opcode == "reduce"]
    if len(reduces) != 1 or len(reduces[0].attrs.get("dimensions", "").strip("{}").split(",")) != 1 or any(
            i.opcode not in ("parameter", "constant", "reduce", "bitcast") for i in body):
        return None
    applied = module.computations.get(next((c for a, c in reduces[0].called() if a == "to_apply"), ""))
    if applied is None or [i.opcode for i in applied.instructions if i.opcode != "parameter"] != ["add"]:
        return None
    return ins.operands[0] if matmul_holder(module, module.instruction(ins.operands[0])) is not None else None


def tuple_element_parameters(module: HloModule, fusion: HloInstruction, element: int) -> set[int] | None:
    """The parameters (by number) the ``element``-th output of a multi-output fusion is computed from (XLA's
    GPU compiler fuses the q, k and v slices of one matmul's result into one loop fusion of three outputs);
    None where the fusion's root is no tuple of that many. One walk over the body."""
    body = {i.name: i for i in fusion_body(module, fusion)}
    roots = [i for i in body.values() if i.is_root]
    if len(roots) != 1 or roots[0].opcode != "tuple" or element >= len(roots[0].operands):
        return None
    found: set[int] = set()
    todo, seen = [roots[0].operands[element]], set()
    while todo:
        name = todo.pop()
        ins = body.get(name)
        if name in seen or ins is None:
            continue
        seen.add(name)
        if ins.opcode == "parameter" and ins.operands and ins.operands[0].isdigit():
            found.add(int(ins.operands[0]))
        todo.extend(ins.operands)
    return found
