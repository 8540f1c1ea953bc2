"""How every report writes an array's type, the op that made it, a live buffer's origin and the
lines a combined collective's parts come from."""

from __future__ import annotations

import re

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.collective_values import value_count
from ...passes.common.sharding_text import pspec_text
from ...passes.models.report import Collective, LiveBuffer, where_text


def shape_text(dtype: str | None, shape: list[int] | None) -> str:
    return f"{dtype or ''}[{','.join(map(str, shape or []))}]"


_WRAPPED = re.compile(r"(\w+)\((.*)\)")
# Scopes JAX names after its own constructs, not after the user's functions.
_NOT_A_FUNCTION = {"", "while", "body", "cond", "checkpoint", "remat", "pjit", "closed_call", "core_call",
                   "eval_jaxpr"}
_COND_BRANCH = re.compile(r"branch_\d+_fun")  # lax.cond's branches, as JAX names them


def _operation(last: str) -> str:
    """The last part of an op name; XLA names an op it made of several JAX ops by their names in brackets,
    joined by ``:`` (``(dot_general:reduce_sum:reduce_sum)``, each possibly a path): their names, once each."""
    if not (last.startswith("(") and last.endswith(")")) or len(_depth_one_split(last, "/")) > 1:
        return last
    names = [_depth_one_split(piece, "/")[-1] for piece in _depth_one_split(last[1:-1], ":")]
    return " + ".join(dict.fromkeys(n for n in names if n)) or last


def short_op_name(op: str) -> str:
    """The op that made a buffer, in the user's terms: ``jit(step)/transpose(jvp(jit(log_softmax)))/reduce_sum``
    -> ``reduce_sum in log_softmax (backward)``: the operation, the innermost of the user's
    functions it ran in (JAX's transformation wrappers taken off), and whether it is the
    backward pass. Never cut inside a name or a bracket."""
    parts = [p for p in _depth_one_split(op, "/") if p]
    if len(parts) > 1 and parts[0].startswith("jit("):
        parts = parts[1:]
    if not parts:
        return op
    backward = False
    function = None
    for part in parts[:-1]:
        while (m := _WRAPPED.fullmatch(part)) is not None:
            backward = backward or m.group(1) == "transpose"
            part = m.group(2)
        if part not in _NOT_A_FUNCTION and not _COND_BRANCH.fullmatch(part):
            function = part
    text = _operation(parts[-1]) + (f" in {function}" if function else "")
    return text + (" (backward)" if backward else "")


def produced_by_text(b: LiveBuffer) -> str:
    """The op that made a live buffer, for its 'produced by' column: ``argument`` for an
    argument (its path is the source column's), the op in the user's terms, or for an
    instruction XLA added with no JAX op behind it (``copy.57``, ``tuple.64``) what it is."""
    # A copy named by what it copies where that tells the user something (an argument, a JAX op, a line); a copy
    # of an XLA value with none of them (a loop's tuple element) stays "copy (added by XLA)".
    if b.copy_of and ("argument " in b.copy_of or b.op_name or b.source is not None):
        return f"copy of {b.copy_of}" + (f" ({short_op_name(b.op_name)})" if b.op_name else "")
    if live_buffer_source(b).startswith("argument "):
        return "argument"
    # A buffer XLA fills from constants: XLA's own op name (broadcast.30) says nothing; its line is its reader's.
    if b.filled_for:
        return "constant, via its consumer"
    if b.op_name:
        return short_op_name(b.op_name)
    m = re.fullmatch(r"([a-z][a-z-]*)(?:\.\d+)*", b.name)
    return f"{m.group(1)} (added by XLA)" if m else b.name


def per_member_text(b: LiveBuffer) -> str:
    """What a buffer is, where a pass could say (``256 x params.w's per-device shape (a per-member copy from
    vmap)``), else empty."""
    return str(b.per_member_copy) if b.per_member_copy is not None else ""


def per_member_note(buffers: list[LiveBuffer]) -> str | None:
    """The advice under a peak some of whose buffers are parameters copied per member of a vmap; None otherwise."""
    copies = [b for b in buffers if b.per_member_copy is not None]
    if not copies:
        return None
    n = f"{len(copies)} buffers" if len(copies) > 1 else "1 buffer"
    hold = "hold" if len(copies) > 1 else "holds"
    return (f"{n} live at the peak ({format_bytes(sum(b.bytes for b in copies))}) {hold} a parameter's per-device "
            "shape once per member of a vmap: a function vmapped with the model closed over keeps a gradient "
            "per member in its backward pass. Calling the model on the batched state inside the function "
            "(jax.vmap of the model where it is called) keeps one (advice, not checked).")


def live_buffer_source(b: LiveBuffer, with_via: bool = True) -> str:
    """Where a buffer live at the peak comes from: the user's line (and the library line it went
    through, unless a column of its own shows that), or for an argument, which has no line of its
    own, its pytree path (XLA's op name for it)."""
    if b.source is None and b.name.startswith("param") and b.op_name:
        return f"argument {b.op_name}"
    if b.source is None and b.copy_of and "argument " in b.copy_of:
        return b.copy_of[b.copy_of.index("argument "):]
    return where_text(b.source, b.via if with_via else None)


def collective_lines(c: Collective, most: int = 3) -> str:
    """The collective's line, and under it, for a combined one, the other lines its parts come
    from (``train.py:5`` / ``with :7, :9``)."""
    others = other_part_lines(c, most)
    return (str(c.source) if c.source else "-") + (f"\n{others}" if others else "")


def other_part_lines(c: Collective, most: int = 3) -> str | None:
    """``with :7, :9``: the lines a combined collective's parts come from besides its own, in its
    file as ``:7``, at most ``most`` lines in all and then how many more; None when there are none."""
    lines = list(dict.fromkeys(str(x) for x in [c.source] + [p.source for p in c.parts] if x is not None))
    if len(lines) < 2:
        return None
    first_file = lines[0].rsplit(":", 1)[0]
    named = [(":" + x.rsplit(":", 1)[1]) if x.rsplit(":", 1)[0] == first_file else x for x in lines[1:most]]
    rest = len(lines) - max(most, 2)
    return f"with {', '.join(named)}" + (f" +{rest}" if rest > 0 else "")


def collective_shape_text(c: Collective) -> str:
    """The collective's array, or for a combined one (a tuple all-reduce, several operands) how many it moves
    and the largest: ``25 arrays (largest f32[512,256])``; its bytes are all of them (the sum of the operands)."""
    if (n := value_count(c)) < 2:  # an all-to-all's tuple has no parts: its bytes count its arrays
        return shape_text(c.dtype, c.shape)
    return f"{n} arrays (largest {shape_text(c.dtype, c.shape)})"


def _depth_one_split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses (XLA's op names nest ``jvp(f)`` and combined ``(a:b)``)."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == sep and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    return pieces + [text[start:]]


def collective_op_text(c: Collective) -> str:
    """What tells apart collectives from one source line (a model whose every layer runs through one call):
    the module path and op from XLA's op name, JAX's wrappers and the top function taken off
    (``transformer/h/1/mlp/fc_in/dot_general (backward)``); a combined collective's shared path and how many
    ops it joins (``transformer/h/1: 4 ops``); without an op name, the library frame, else the HLO name."""
    if not c.op_name:
        return str(c.via) if c.via else c.hlo_name
    scope: list[str] = []
    backward = False
    joined = 0
    parts = _depth_one_split(c.op_name, "/")
    if len(parts) > 1 and parts[0].startswith("jit("):
        parts = parts[1:]  # the jitted step itself: every row shares it
    for part in parts:
        alternatives = _depth_one_split(part[1:-1], ":") if part.startswith("(") and part.endswith(")") else []
        if len(alternatives) > 1:
            joined = len(alternatives)
            backward = backward or all("transpose(" in a for a in alternatives)
            break
        while (m := _WRAPPED.fullmatch(part)) is not None:
            backward = backward or m.group(1) == "transpose"
            part = m.group(2)
        if part not in _NOT_A_FUNCTION:
            scope.append(part)
    if len(scope) > 2 or (joined and len(scope) > 1):
        scope = scope[1:]  # the top module (or function) the step calls: rows of one model share it
    if joined:
        return (f"{'/'.join(scope)}: " if scope else "") + f"{joined} ops" + (" (backward)" if backward else "")
    return "/".join(scope) + (" (backward)" if backward else "")


def parts_text(c: Collective) -> str:
    """Each part of a combined collective: ``f32[2048,1024] 8.0 MiB train.py:5``, one per line."""
    return "\n".join(f"{shape_text(p.dtype, p.shape)} {format_bytes(p.bytes)} {where_text(p.source, p.via)}"
                     for p in c.parts)


def earlier_sharding_text(sharding: list[list[str]] | None) -> str:
    """An output's sharding before rewrite pinned it: ``unknown`` where the compiled program did not say
    (pspec_text would print ``None``, which reads as a JAX sharding)."""
    return "unknown" if sharding is None else pspec_text(sharding)


# A path's positional index or attribute right after its argument (``[0]``, ``.mu``).
_POSITIONAL = re.compile(r"\[\d+\]|\.\w+")


def path_tail_text(path: str, width: int) -> str:
    """A pytree path cut to ``width`` in its middle, its argument and its last keys kept (``result[0]…['1']
    ['output']['dense']['kernel']``): the end is where paths of one pytree differ, so rows stay told apart."""
    if len(path) <= width:
        return path
    head = path.split("[", 1)[0] if not path.startswith("[") else ""
    # The argument and its positional indices (``result[0]``, ``result[1][0].mu``) when they leave room.
    while True:
        rest = path[len(head):]
        m = _POSITIONAL.match(rest)
        if m is None or len(head) + len(m.group(0)) > width // 2:
            break
        head += m.group(0)
    # The tail as many characters as fit, a key cut at its start if need be (…d_embeddings']['embedding']
    # tells word from position embeddings; whole keys only would drop it).
    return head + "…" + path[-max(width - len(head) - 1, 1):]
