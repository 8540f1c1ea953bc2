"""A GPU all-reduce that sums several values at once: XLA's GPU all-reduce combiner flattens each value (a
bitcast), concatenates them into one buffer, all-reduces the buffer and slices each value back out of the
sum. Where the CPU combiner makes one tuple all-reduce with an operand per value, this one has one operand, a
concatenate, and the values are that concatenate's operands: the collective passes read each value as they
read a tuple's operand.
"""

from __future__ import annotations

import re
from math import prod

from ..common.shapes import parse_arrays
from .module import HloInstruction, HloModule

_FLATTENS = frozenset({"bitcast", "reshape"})
_SLICE = re.compile(r"slice=\{\[(\d+):(\d+)\]\}")


def _called(module: HloModule, ins: HloInstruction) -> list[HloInstruction]:
    comp = module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
    return list(comp.instructions) if comp is not None else []


def _behind_flattening(module: HloModule, name: str) -> str:
    ins = module.instruction(name)
    while ins is not None and ins.opcode in _FLATTENS and len(ins.operands) == 1:
        name = ins.operands[0]
        ins = module.instruction(name)
    return name


def _concatenates_in_order(module: HloModule, ins: HloInstruction) -> bool:
    """A concatenate of its operands, or a fusion of only a concatenate of its parameters in their order."""
    if ins.opcode == "concatenate":
        return True
    body = _called(module, ins) if ins.opcode == "fusion" else []
    roots = [i for i in body if i.opcode == "concatenate"]
    numbers = {i.name: i.operands[0] for i in body if i.opcode == "parameter" and i.operands}
    return len(roots) == 1 and {i.opcode for i in body} <= {"parameter", "concatenate"} \
        and [numbers.get(o) for o in roots[0].operands] == [str(k) for k in range(len(ins.operands))]


def concatenated_values(module: HloModule | None, ins: HloInstruction) -> list[str] | None:
    """The values a reduction's one operand concatenates (each behind the bitcast that flattened it), in the
    buffer's order; None where its operand is no concatenate of several values."""
    if module is None or len(ins.operands) != 1:
        return None
    cat = module.instruction(ins.operands[0])
    if cat is None or len(cat.operands) < 2 or not _concatenates_in_order(module, cat):
        return None
    return [_behind_flattening(module, o) for o in cat.operands]


def summed_values(module: HloModule | None, ins: HloInstruction) -> list[str]:
    """The values a reduction sums: the ones it concatenated, or its operands."""
    return concatenated_values(module, ins) or list(ins.operands)


def slices_back(module: HloModule, ins: HloInstruction, users: dict[str, list[HloInstruction]]
                ) -> dict[int, HloInstruction]:
    """Each value's offset in the summed buffer -> the slice (or fusion of one slice) that takes it back out
    of the sum's result (an async sum's done op's)."""
    result = next((u for u in users.get(ins.name, ()) if u.opcode.endswith("-done")), ins)
    out: dict[int, HloInstruction] = {}
    for u in users.get(result.name, ()):
        body = [i for i in _called(module, u) if i.opcode != "parameter"] if u.opcode == "fusion" else [u]
        found = _SLICE.search(body[0].attr_text) if len(body) == 1 and body[0].opcode == "slice" else None
        if found:
            out[int(found.group(1))] = u
    return out


def offsets(module: HloModule, ins: HloInstruction) -> list[int]:
    """Each concatenated value's offset in the buffer (the flattened values' elements before it)."""
    cat = module.instruction(ins.operands[0])
    values = [v for o in (cat.operands if cat is not None else ()) if (v := module.instruction(o)) is not None]
    sizes = [prod(a.dims) for v in values for a in parse_arrays(v.shape)[:1]]
    return [sum(sizes[:k]) for k in range(len(sizes))]
