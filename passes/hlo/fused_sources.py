"""The user's line of a fusion that has no metadata of its own: its fused ops'.

XLA names a fusion after its root and gives it the root's metadata. A root XLA made itself (the algebraic
simplifier turns a multiply by a one-hot into ``select(eq, x, 0)``) has none, so the fusion has no op name and no
line, though the ops fused into it each carry theirs: a language model's loss gradient, f32[8,512,50304] and
the largest buffer at its peak (``broadcast_select_fusion.1``), fuses the one-hot, the loss's subtract and the
unembedding's dot, at the loss line and the model's. Its line is the root's where the root has one, else the line
most of its fused ops carry (ties: the one nearest the root). A constant's metadata is not asked (XLA shares one
zero among unrelated ops: lm_step's fused 0 names an embedding's scatter-add), and a fusion that only fills a
buffer from constants (every operand a constant) is its consumer's business (constant fills), not this."""

from __future__ import annotations

from collections.abc import Callable

from ..models.report import SourceLocation
from .module import HloInstruction, HloModule

Attribution = tuple[SourceLocation | None, SourceLocation | None]
# Fused ops whose metadata says nothing of the fusion's line: a constant XLA shares, a parameter.
_NO_LINE = frozenset({"constant", "parameter"})


def fused_ops_source(hlo: HloModule, ins: HloInstruction,
                     attribute: Callable[[HloInstruction], Attribution]) -> Attribution:
    """(the user's line, the library line) of the fusion ``ins`` from its fused ops (``attribute`` gives an
    op's); (None, None) where ``ins`` is no fusion, has metadata of its own, or no fused op has a user line."""
    if ins.opcode != "fusion" or ins.metadata or all(
            (o := hlo.instruction(name)) is not None and o.opcode == "constant" for name in ins.operands):
        return None, None
    called = [hlo.computations.get(name) for role, name in ins.called() if role == "calls"]
    if len(called) != 1 or called[0] is None:
        return None, None
    fused = called[0].by_name()
    root = next((i for i in called[0].instructions if i.is_root), None)
    # The fused ops from the root back to the parameters, nearest first: the order ties are broken in.
    order: list[HloInstruction] = []
    seen: set[str] = set()
    frontier = [root] if root is not None else []
    while frontier:
        order += frontier
        seen.update(i.name for i in frontier)
        # Each op once, though several of the level read it.
        frontier = list({o: fused[o] for i in frontier for o in i.operands if o in fused and o not in seen}.values())
    order += [i for i in called[0].instructions if i.name not in seen]  # ops the root does not read
    lines = [(i, attribute(i)) for i in order if i.metadata and i.opcode not in _NO_LINE]
    lines = [(i, at) for i, at in lines if at[0] is not None]
    assert all(at[0] is not None for _, at in lines)
    if not lines:
        return None, None
    count: dict[tuple[str, int], int] = {}
    for _, (source, _) in lines:
        key = (source.file, source.line) if source is not None else ("", 0)
        count[key] = count.get(key, 0) + 1
    if root is not None and lines[0][0] is root:
        return lines[0][1]
    most = max(count.values())
    return next(at for _, at in lines if at[0] is not None and count[(at[0].file, at[0].line)] == most)
