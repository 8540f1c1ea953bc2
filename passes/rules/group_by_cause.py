"""One finding per cause: findings of one rule at the same user line, through the
same library frame, about the same parameter (one layer's or every layer's) are
one finding with a count, their bytes added up and the list of their ops.

A 12-layer model whose every layer multiplies by a badly sharded weight gives
twelve collectives, one per layer, all at the user's ``model(...)`` line: the
user has one thing to fix, and reads it once. Layers are told apart by the
numbers in their parameter paths (``['h']['3']``, ``layers[3]``), which the
pattern replaces with ``*``; a parameter named the same way in every member
keeps its exact path. A bare list index is a layer only under a name that says
so (``layers``, ``blocks``): penzai keeps distinct weights in one flat list
(``params[20]``), and those are different parameters.
"""

from __future__ import annotations

import re

from ..models.report import Finding

_LAYER_KEY = re.compile(r"\[(?:'\d+'|\"\d+\")\]|(?<=layers)\[\d+\]|(?<=blocks)\[\d+\]|(?<=h)\[\d+\]")


def layer_pattern(path: str) -> str:
    """``params['h']['3']['attn']['kernel']`` -> ``params['h'][*]['attn']['kernel']``."""
    return _LAYER_KEY.sub("[*]", path)


def _key(f: Finding) -> tuple[object, ...]:
    src = (f.source.file, f.source.line) if f.source else None
    via = (f.via.file, f.via.line) if f.via else None
    parameter = layer_pattern(f.parameter) if f.parameter else None
    # Without a parameter, the fix text tells causes apart (a gather of an input vs. an activation).
    return (f.rule, f.severity, src, via, parameter,
            f.parameter_sharding and str(f.parameter_sharding), f.fix if parameter is None else None)


def _merged(group: list[Finding]) -> Finding:
    first = max(group, key=lambda f: (f.bytes or 0, f.subject or ""))  # the largest stands for the group
    if len(group) == 1:
        return first
    paths = {f.parameter for f in group}
    parameter = first.parameter if len(paths) == 1 else layer_pattern(first.parameter or "") or None
    total = sum(f.bytes or 0 for f in group) if any(f.bytes is not None for f in group) else None
    ops = sorted({op for f in group for op in (f.ops or ([f.subject] if f.subject else []))}, key=_natural)
    update = {"count": sum(f.count for f in group), "bytes": total, "ops": ops, "parameter": parameter}
    if parameter and first.parameter and parameter != first.parameter:  # the texts name every layer's
        update["message"] = first.message.replace(first.parameter, parameter)
        update["fix"] = first.fix.replace(first.parameter, parameter) if first.fix else None
    return first.model_copy(update=update)


def _natural(text: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def group_by_cause(findings: list[Finding]) -> list[Finding]:
    """The findings with each cause once, in the order of each cause's first finding (linear)."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for f in findings:
        groups.setdefault(_key(f), []).append(f)
    return [_merged(g) for g in groups.values()]
