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

A step's state has a second kind of sharing: a parameter and its optimizer
moments (``params['embed']``, ``opt_state['mu']['embed']``, ``opt_state['nu']
['embed']``) replicated, or coming back on another layout, the same way are one
cause, one SL201 and one SL203, whichever lines built them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ..common.byte_sizes import format_bytes
from ..common.pytree_paths import key_path, layer_pattern, natural_order
from ..common.sharding_text import pspec_text
from ..common.word_lists import listed
from ..models.report import Finding, FixCandidate, TensorInfo
from .table import codes_where

_RESULT = re.compile(r"\bresult(?:\[[^\]\s]*\]|\.\w+)*")


def _pattern_of(m: re.Match[str]) -> str:
    return layer_pattern(m.group(0))


def _key(f: Finding) -> tuple[object, ...]:
    src = (f.source.file, f.source.line) if f.source else None
    via = (f.via.file, f.via.line) if f.via else None
    # Parameters given the same change at one line are one cause (three weights sharded on the
    # dimension they contract, penzai's query, key and value); without a parameter, the fix text
    # tells causes apart (a gather of an input vs. an activation).
    change = (str(f.parameter_sharding), str(f.suggested_sharding)) if f.parameter else None
    if f.parameter is None and f.constraint is not None and f.constraint.source is not None:
        # Collectives a with_sharding_constraint causes are one cause wherever XLA placed them (a loop body's
        # gather at the op that reads along the constrained axis, the one after the loop at the constraint's
        # own line), when its fix is one edit of that constraint.
        at = (f.constraint.source.file, f.constraint.source.line, str(f.constraint.sharding))
        return (f.rule, f.severity, "constraint", at, f.fix)
    if (split := _split_of(f)) is not None:
        # A finding whose fix constrains a propagated value (SL105's split, which its rule already says once for
        # every line whose gathers it causes; SL206's padded value) is that value's cause, kept apart from the
        # other findings at its line.
        return (f.rule, f.severity, "split", split)
    return (f.rule, f.severity, src, via, change, f.fix if f.parameter is None else None)


def _split_of(f: Finding) -> str | None:
    """The propagated values a finding's candidates constrain (an activation's split at its origin), or None."""
    return next((c.value for c in f.candidates if c.value.startswith("propagated_value[")), None)


def _merged(group: list[Finding]) -> Finding:
    # The largest stands for the group; of equal ones, a finding on the parameter most of the group names (the
    # weight whose output five gathers rebuild, not the one weight that reads the last of them).
    named = Counter(layer_pattern(f.parameter) for f in group if f.parameter)
    first = max(group, key=lambda f: (f.bytes or 0, named[layer_pattern(f.parameter)] if f.parameter else 0,
                                      f.subject or ""))
    if len(group) == 1:
        return first
    paths = {f.parameter for f in group}
    parameter = first.parameter if len(paths) == 1 else layer_pattern(first.parameter or "") or None
    total = sum(f.bytes or 0 for f in group) if any(f.bytes is not None for f in group) else None
    ops = sorted({op for f in group for op in (f.ops or ([f.subject] if f.subject else []))}, key=natural_order)
    update: dict[str, object] = {"count": sum(f.count for f in group), "bytes": total, "ops": ops,
                                 "parameter": parameter}
    message, fix = first.message, first.fix
    if parameter and first.parameter and parameter != first.parameter:  # the texts name every layer's
        message, fix = message.replace(first.parameter, parameter), fix and fix.replace(first.parameter, parameter)
        # The outputs the texts name are every layer's too (SL205's result[0].blocks[1] for blocks[*]).
        message, fix = _RESULT.sub(_pattern_of, message), fix and _RESULT.sub(_pattern_of, fix)
    others = sorted({layer_pattern(p) for p in paths if p} - {parameter}, key=natural_order)
    if not parameter and first.constraint is not None:  # one constraint's collectives: the others named
        rest = sorted((f for f in group if f is not first), key=lambda f: (-(f.bytes or 0), f.subject or ""))
        message += "; the same constraint causes " + listed([
            f"{f.subject}" + (f" at line {f.source.line}" if f.source else "")
            + (f" ({format_bytes(f.bytes)} per step)" if f.bytes else "") for f in rest])
    if parameter and others:  # several weights, one change: the finding names each
        update["parameters"] = [parameter, *others]
        message += _other_weights(group, others, first)
        fix = fix and fix.replace(parameter, listed([parameter, *others]), 1)
    if any(c.together for f in group for c in f.candidates):  # tensor-parallel pairs: each member's partner
        update["candidates"], patterned = _merged_pairs(group)
        for path, name in patterned.items():
            message, fix = message.replace(path, name), fix and fix.replace(path, name)
    update["message"], update["fix"] = message, fix
    if not parameter and all(len(f.provenance) == 1 for f in group):
        # Collectives of one line and no argument, each with its own one-line why (the gathers XLA inserts to
        # return each output on its stated out_shardings: each names its output): every why is said.
        whys = list(dict.fromkeys(f.provenance[0] for f in sorted(group, key=lambda f: natural_order(f.subject or ""))))
        update["provenance"] = whys[:_WHYS] + ([f"and {len(whys) - _WHYS} more alike"] if len(whys) > _WHYS else [])
    return first.model_copy(update=update)


def _merged_pairs(group: list[Finding]) -> tuple[list[FixCandidate], dict[str, str]]:
    """The group's pair candidates (SL103's: a weight and the one its matmul's output is read by, each layer's),
    one per weight and layout, every layer's as one pattern where the group holds several layers of it, with
    the partners of all its members; and each path so renamed -> its pattern."""
    pairs = [c for f in group for c in f.candidates if c.together]
    paths = [c.value for c in pairs] + [t.value for c in pairs for t in c.together]
    layers: dict[str, set[str]] = {}
    for p in paths:
        layers.setdefault(layer_pattern(p), set()).add(p)
    name = {p: layer_pattern(p) if len(layers[layer_pattern(p)]) > 1 else p for p in paths}
    merged: dict[tuple[str, str], list[FixCandidate]] = {}
    for c in pairs:
        together = merged.setdefault((name[c.value], str(c.sharding)), [])
        for t in c.together:
            moved = FixCandidate(value=name[t.value], sharding=t.sharding)
            if moved not in together:
                together.append(moved)
    by_key = {(name[c.value], str(c.sharding)): c.sharding for c in pairs}
    return ([FixCandidate(value=v, sharding=by_key[(v, k)], together=t) for (v, k), t in merged.items()],
            {p: n for p, n in name.items() if p != n})


# The whys a group of collectives with no argument says, at most (each its own op's).
_WHYS = 4


def _other_weights(group: list[Finding], others: list[str], first: Finding) -> str:
    """What the group's other weights are: weights written the same way at this line whose own findings
    named some of the group's collectives, each with how many and their bytes (counted in the group's), not
    causes of the first weight's (issue #46: "the same holds for lm_head and v_proj" read as three causes of
    the Llama's o_proj gathers; the lm_head and v_proj read the stream o_proj's output split)."""
    counts: dict[str, tuple[int, int]] = {}
    for f in group:
        if f.parameter and (name := layer_pattern(f.parameter)) in others:
            n, b = counts.get(name, (0, 0))
            counts[name] = (n + f.count, b + (f.bytes or 0))
    each = [f"{name} ({n}, {format_bytes(b)} per step)" if b else f"{name} ({n})"
            for name, (n, b) in ((o, counts.get(o, (0, 0))) for o in others)]
    return (f"; of the group's collectives, some were traced to other weights written "
            f"{pspec_text(first.parameter_sharding)} at this line, counted in its figures: {listed(each)}")



# Rules about a step's arguments and state (their traits say ``about_state``): a parameter and the
# optimizer state that mirrors it (the same key path under another argument, the same shape and layout)
# are one cause.
_STATE_RULES = codes_where(lambda t: t.about_state)


def _paths(f: Finding) -> list[str]:
    return [p for p in (f.subject, f.parameter) if p]


def _mirror_keys(findings: list[Finding], arguments: Sequence[TensorInfo]) -> dict[int, tuple[object, ...]]:
    """Each state finding's cause: the shortest key path that its own path ends with, among its rule's
    findings and the ``arguments`` of its shape (the parameter the optimizer state mirrors, with or without a
    finding of its own: two moments of a parameter that comes back as written are one cause), and its texts
    with the paths left out."""
    shapes = {t.path: tuple(t.shape) for t in arguments}
    anchors: dict[str, set[tuple[str, tuple[int, ...] | None]]] = {}
    for f in findings:
        if f.rule in _STATE_RULES and f.parameter:
            anchors.setdefault(f.rule, set()).add((key_path(f.parameter), shapes.get(f.parameter)))
            anchors[f.rule].update((key_path(t.path), tuple(t.shape)) for t in arguments)
    out: dict[int, tuple[object, ...]] = {}
    for k, f in enumerate(findings):
        if f.rule not in _STATE_RULES or not f.parameter or not key_path(f.parameter):
            continue
        own, shape = key_path(f.parameter), shapes.get(f.parameter)
        anchor = min((a for a, s in anchors[f.rule] if a and own.endswith(a) and s in (shape, None)),
                     key=len, default=own)
        message, fix = f.message, f.fix or ""
        for p in sorted(_paths(f), key=len, reverse=True):
            message, fix = message.replace(p, "*"), fix.replace(p, "*")
        # Nor the layout each went in on: a parameter and its moments that come back on one layout are one
        # cause whatever layouts they were given (fc1's kernel P('data'), its Adam moments P()).
        if f.parameter_sharding is not None:
            spec = pspec_text(f.parameter_sharding)
            message, fix = message.replace(spec, "<input layout>"), fix.replace(spec, "<input layout>")
        out[k] = (f.rule, f.severity, anchor, message, fix, str(f.suggested_sharding))
    return out


def _merged_mirrors(group: list[Finding], anchor: object, arguments: Sequence[TensorInfo]) -> Finding:
    """The parameter's finding (the shortest key path) stands for its optimizer state's; where the parameter
    has none, its first moment's stands for the others."""
    # The parameter before its optimizer state where both key paths are as short (params['a'], opt_state['a']).
    first = min(group, key=lambda f: (len(key_path(f.parameter or "")),
                                      (f.parameter or "").split("[")[0].lower().startswith("opt"), f.parameter or ""))
    if len(group) == 1:
        return first
    whose = "its optimizer state" if key_path(first.parameter or "") == anchor else "the same parameter's state"
    others = [f.parameter for f in group if f is not first and f.parameter]
    total = sum(f.bytes or 0 for f in group) if any(f.bytes is not None for f in group) else None
    ops = sorted({op for f in group for op in (f.ops or ([f.subject] if f.subject else []))}, key=natural_order)
    inputs = {pspec_text(f.parameter_sharding) for f in group if f is not first and f.parameter_sharding is not None}
    same = first.parameter_sharding is None or inputs <= {pspec_text(first.parameter_sharding)}
    if same:
        named, how = listed(others), "the same key path, shape and layout"
    else:  # given other layouts: each with its own output and layout
        named, how = listed([f"{f.parameter} (" + ", ".join(
            ([f.subject] if f.subject and f.subject != f.parameter else [])
            + ([f"given {pspec_text(f.parameter_sharding)}"] if f.parameter_sharding is not None else [])) + ")"
            for f in group if f is not first and f.parameter]), "the same key path and shape"
    rest = [f for f in group if f is not first and f.parameter]
    return first.model_copy(update={
        "count": sum(f.count for f in group), "bytes": total, "ops": ops,
        "parameters": [first.parameter, *others],
        "message": first.message + f"; the same holds for {named}, {whose} ({how})"
        + _together(first, rest, whose, arguments)})


def _together(first: Finding, rest: list[Finding], whose: str, arguments: Sequence[TensorInfo]) -> str:
    """The group's bytes, where each member's finding gives its own (the first's message gives only its
    own): the total per device (and global, from the arguments' sizes) and what it is made of."""
    if first.bytes is None or any(f.bytes is None for f in rest):
        return ""
    sizes = [f.bytes or 0 for f in rest]
    total = (first.bytes or 0) + sum(sizes)
    by_path = {t.path: t.bytes for t in arguments}
    whole = [by_path.get(f.parameter or "") for f in (first, *rest)]
    overall = f" ({format_bytes(sum(b or 0 for b in whole))} global)" if None not in whole else ""
    made = (f"{len(sizes)} values of {format_bytes(sizes[0])} each" if len(set(sizes)) == 1
            else listed([format_bytes(b) for b in sizes]))
    if whose == "its optimizer state":
        return (f"; together {format_bytes(total)} per device{overall}: {first.parameter}'s "
                f"{format_bytes(first.bytes or 0)} and its optimizer state's {format_bytes(sum(sizes))} ({made})")
    count = f"{len(sizes) + 1} values of {format_bytes(total // (len(sizes) + 1))} each" \
        if set(sizes) == {first.bytes} else listed([format_bytes(first.bytes or 0), *map(format_bytes, sizes)])
    return f"; together {format_bytes(total)} per device{overall}: {count}"


def group_by_cause(findings: list[Finding], arguments: Sequence[TensorInfo] = ()) -> list[Finding]:
    """The findings with each cause once, in the order of each cause's first finding (linear).
    ``arguments``: the target's, whose key paths name the parameter a state value mirrors."""
    mirrors = _mirror_keys(findings, arguments)
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for k, f in enumerate(findings):
        if k in mirrors:
            groups.setdefault(("mirror", *mirrors[k]), []).append(f)
        else:
            groups.setdefault(_key(f), []).append(f)
    return [_merged_mirrors(g, key[3], arguments) if key[0] == "mirror" else _merged(g) for key, g in groups.items()]
