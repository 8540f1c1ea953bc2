"""One line for JAX's IndivisibleError raised while the user's script lowers its step: the argument,
its dimension and the mesh axis that does not divide it, and the multiple to use instead.

JAX's own text names the sharding and the full shape but not the argument (its traceback frames
are filtered), so the argument is found here: the call on the user's line that raised
(``step.lower(params, opt_state, ids)``), the value passed there whose shape is the one JAX names,
and the jitted function's parameter at that position (``input_ids``)."""

from __future__ import annotations

import ast
import inspect
import os
import re
from typing import Any

# An entry of P(...) may be a tuple of axes (P(('data', 'model'), None)): one level of parentheses inside.
_NESTED = r"(?:[^()]|\([^()]*\))*"
_MESSAGE = re.compile(rf"Mesh\((?P<mesh>{_NESTED})\).*?spec=P\((?P<spec>{_NESTED})\).*?array axis (?P<dim>\d+) is "
                      r"partitioned (?P<parts>\d+) times, but the dimension size is (?P<size>\d+) "
                      r"\(full shape: \((?P<shape>[\d, ]*)\)", re.S)


def indivisible_problem(exc: BaseException, path: str, params: dict[str, Any]) -> str | None:
    """The one-line problem for an IndivisibleError from the script at ``path``; None for anything else."""
    if type(exc).__name__ != "IndivisibleError":
        return None
    m = _MESSAGE.search(str(exc))
    if m is None:
        return None
    dim, parts, size = int(m["dim"]), int(m["parts"]), int(m["size"])
    shape = tuple(int(s) for s in m["shape"].replace(" ", "").split(",") if s)
    spec = [s.strip() for s in _split_top(m["spec"])]
    axes = spec[dim] if dim < len(spec) else "?"
    sizes = dict(re.findall(r"'(\w+)': (\d+)", m["mesh"]))
    named = re.findall(r"'(\w+)'", axes)
    axis_text = " x ".join(f"{a!r} (size {sizes.get(a, '?')})" for a in named) or axes
    named_argument = _argument_name(exc, path, shape)
    what = named_argument or "an argument"
    # The --set that gave the dimension its size, when one did: fit searches that parameter's multiples.
    setters = [k for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool) and v == size]
    cause = f" (--set {setters[0]}={size})" if len(setters) == 1 else ""
    defaults = [] if setters else _defaults_of_size(exc, path, size, params)
    if len(setters) == 1:
        fix = f"use a multiple of {parts}, or fit --param {setters[0]} --multiple-of {parts}"
    elif len(defaults) == 1:  # the script's own default for a parameter of shard_lint_targets: fit can size it
        fix = (f"use a multiple of {parts} (shard_lint_targets' {defaults[0]}={size} by default: "
               f"fit --param {defaults[0]} --multiple-of {parts})")
    else:  # a size written into the script (a vocabulary, a hidden width, a batch): pad it or shard it elsewhere
        fix = _pad_or_reshard(size, parts, dim, spec, sizes)
        # Only a whole array passed as the step's argument, split on its leading dim, reads as a batch; a
        # leaf inside a pytree (an embedding's vocabulary) is a model size, which fit does not search.
        if dim == 0 and named_argument is not None and "[" not in named_argument:
            fix += (f" (if it is the batch: make it a parameter of shard_lint_targets, then fit --param NAME "
                    f"--multiple-of {parts})")
    return (f"{what} has shape {shape}: its dim {dim} is {size}{cause}, which mesh axis {axis_text} of P({m['spec']}) "
            f"does not divide: {fix}")


def _pad_or_reshard(size: int, parts: int, dim: int, spec: list[str], sizes: dict[str, str]) -> str:
    """Pad the dimension to the next multiple of ``parts``, or shard it on a mesh axis that divides it and
    that no other dimension of the same spec uses; with none, leave it unsharded."""
    padded = -(-size // parts) * parts
    used = {a for i, entry in enumerate(spec) if i != dim for a in re.findall(r"'(\w+)'", entry)}
    dividing = [f"{a!r} (size {n})" for a, n in sizes.items() if a not in used and int(n) > 1 and size % int(n) == 0]
    elsewhere = (f"shard dim {dim} on {' or '.join(dividing)}, which divide{'s' if len(dividing) == 1 else ''} {size}"
                 if dividing else f"leave dim {dim} unsharded (None): no mesh axis divides {size}")
    return f"pad it to {padded} (the next multiple of {parts}) where the script sets it, or {elsewhere}"

def _defaults_of_size(exc: BaseException, path: str, size: int, params: dict[str, Any]) -> list[str]:
    """The parameters of the script's ``shard_lint_targets`` (the frame of it that raised) whose default is
    ``size`` and that no --set gave: where one gave the dimension its size, fit sizes it."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if os.path.abspath(frame.f_code.co_filename) == path and frame.f_code.co_name == "shard_lint_targets":
            fn = frame.f_globals.get("shard_lint_targets")
            try:
                signature = inspect.signature(fn) if fn is not None else None
            except (TypeError, ValueError):
                signature = None
            if signature is None:
                return []
            return [name for name, p in signature.parameters.items() if name not in params
                    and isinstance(p.default, int) and not isinstance(p.default, bool) and p.default == size]
        tb = tb.tb_next
    return []


def _split_top(spec: str) -> list[str]:
    """P(...)'s entries, a tuple entry kept whole: "'data', ('x', 'y'), None"."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur] if cur.strip() else out


def _argument_name(exc: BaseException, path: str, shape: tuple[int, ...]) -> str | None:
    """The jitted function's parameter (and the path inside it) passed a value of this shape on the
    user's line that raised; None when it cannot be told."""
    tb, frame = exc.__traceback__, None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
            frame, lineno = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    if frame is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and call.lineno <= lineno <= (call.end_lineno or call.lineno)
                and isinstance(call.func, ast.Attribute) and call.func.attr in ("lower", "trace")):
            continue
        fn = _jitted_function(call.func.value, frame)
        for i, (shown, value) in enumerate(_passed(call.args, frame)):
            inner = _path_of_shape(value, shape)
            if inner is None:
                continue
            name = _parameter_at(fn, i) or shown
            return name + inner + (f" (passed as {shown})" if shown != name else "")
    return None


def _jitted_function(node: ast.expr, frame) -> Any:
    """What ``.lower`` is called on: a name's value, or the function a ``jax.jit(step, ...)`` written in the
    call wraps (``jax.jit(step).lower(*args)``)."""
    if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).split(".")[-1] == "jit":
        return _evaluated(node.args[0], frame)
    return _evaluated(node, frame)


def _passed(args: list[ast.expr], frame) -> list[tuple[str, Any]]:
    """Each positional value of a call, as written and its value: a starred sequence's items each
    (``lower(*args)``: ``args[0]``, ``args[1]``, ...)."""
    out: list[tuple[str, Any]] = []
    for arg in args:
        if isinstance(arg, ast.Starred):
            items = _evaluated(arg.value, frame)
            written = ast.unparse(arg.value)
            out += [(f"{written}[{k}]", v) for k, v in enumerate(items)] if isinstance(items, (tuple, list)) \
                else [(ast.unparse(arg), None)]
        else:
            out.append((ast.unparse(arg), _evaluated(arg, frame)))
    return out


def _parameter_at(fn: Any, position: int) -> str | None:
    """The name of ``fn``'s parameter that takes the positional argument at ``position``: a ``*args``
    parameter's item by its index (``args[1]``); None where it cannot be told."""
    try:
        params = list(inspect.signature(fn).parameters.values()) if fn is not None else []
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if position < len(positional):
        return positional[position].name
    rest = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
    return f"{rest.name}[{position - len(positional)}]" if rest is not None else None


def _evaluated(node: ast.expr, frame) -> Any:
    """A name or attribute chain's value in the frame; None for anything else."""
    if isinstance(node, ast.Name):
        return frame.f_locals.get(node.id, frame.f_globals.get(node.id))
    if isinstance(node, ast.Attribute):
        base = _evaluated(node.value, frame)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _path_of_shape(value: Any, shape: tuple[int, ...]) -> str | None:
    """'' when the value has the shape; a key path (``['w']``) to the first leaf that has it; else None."""
    if tuple(getattr(value, "shape", ()) or ()) == shape and hasattr(value, "shape"):
        return ""
    import jax

    try:
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    except Exception:
        return None
    for key_path, leaf in leaves:
        if tuple(getattr(leaf, "shape", ()) or ()) == shape:
            return jax.tree_util.keystr(key_path)
    return None
