"""The ``in_shardings=`` text a user pastes, built from the program's real
argument pytree and checked before it is shown (as ``out_shardings.py`` does for
outputs).

Each positional argument is written as a literal where its containers are
tuples, lists and dicts (``{'w': NamedSharding(mesh, P('data', None))}``), as
one ``NamedSharding`` when every leaf of it takes the same one (a pytree prefix),
and otherwise (an optax state, an ``nnx.State``, an Equinox module) as a map over
the argument by key path, which spells any container:
``jax.tree_util.tree_map_with_path(lambda path, _: {"[0].mu['w']": NamedSharding(...), ...}
[jax.tree_util.keystr(path)], opt_state)``.

The check evaluates the text with the argument names bound to the abstract
inputs, flattens it against the argument tree the way ``jax.jit`` flattens an
``in_shardings`` prefix (JAX's own code, through jax_adapter), and compares
every leaf with the intended sharding.
"""

from __future__ import annotations

from typing import Any

from ....passes.common.sharding_text import named_sharding_text, normalized, pspec_text
from ....passes.models.report import TensorInfo
from ...adapter import jax_adapter
from ...backend.out_shardings import ArgumentTree, argument_names, keys_text, paste_namespace, path_table_text


def build_text(lowered: Any, inputs: tuple[TensorInfo, ...], intended: list[list[list[str]]]) -> str:
    args = jax_adapter.call_arguments(lowered)
    tree = ArgumentTree(args, jax_adapter.kept_argument_leaves(lowered))  # module argument numbers: intended's
    names = argument_names(inputs, tree, args)

    def same(leaves: list[int]) -> bool:
        first = pspec_text(intended[leaves[0]])  # P('x') for every rank: what a prefix gives each leaf
        return all(pspec_text(intended[i]) == first for i in leaves)

    def render(node, expr: str | None, sibling: str = "None") -> str:
        """``expr``: the Python for this node (``opt_state[0]``), None where a key has no spelling.
        ``sibling``: the text for a leaf jit pruned (the program never reads it): its siblings' common
        sharding, so pasting does not move it (None would replicate it on every call)."""
        if tree.is_pruned(node):
            return sibling
        if tree.is_leaf(node):
            return named_sharding_text(intended[tree.index[id(node)]])
        leaves = tree.leaf_range(node)
        if not leaves:
            return "None"
        if (len(leaves) > 1 or len(tree.jax.tree_util.tree_leaves(node)) > 1) and same(leaves):
            return named_sharding_text(intended[leaves[0]])  # a pytree prefix: one sharding for the subtree
        common = named_sharding_text(intended[leaves[0]]) if same(leaves) else "None"
        kids = [(k, c, None if expr is None or keys_text((k,)) is None else expr + keys_text((k,)))
                for k, c in tree.children(node)]
        if type(node) is dict:
            return "{" + ", ".join(f"{k.key!r}: {render(c, x, common)}" for k, c, x in kids) + "}"
        if type(node) in (tuple, list):
            items = [render(c, x, common) for _, c, x in kids]
            if type(node) is list:
                return "[" + ", ".join(items) + "]"
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if expr is None:
            raise ValueError(f"a {type(node).__name__} needs one sharding per leaf, and the argument it is in has "
                             "no name in the function's signature to map them over")
        return path_table_text(node, lambda leaf: render(leaf, None, common), expr)

    parts = [render(arg, names.get(i)) for i, (_, arg) in enumerate(tree.children(args))]
    return "in_shardings=(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def placement_text(lowered: Any, inputs: tuple[TensorInfo, ...], in_text: str) -> str | None:
    """On Explicit axes a sharding is part of an input's type and ``jit`` refuses an
    ``in_shardings=`` its inputs do not already have: the inputs are placed instead,
    ``params, x = jax.device_put((params, x), (...))`` with the checked in_shardings
    tuple (device_put takes the same pytree prefixes as jit). None where an argument
    has no name to assign to."""
    args = jax_adapter.call_arguments(lowered)
    tree = ArgumentTree(args, jax_adapter.kept_argument_leaves(lowered))
    names = {**argument_names(inputs, tree, args), **jax_adapter.keyword_argument_names(lowered)}
    count = len(list(tree.children(args)))
    if count == 0 or any(i not in names for i in range(count)):
        return None
    target = ", ".join(names[i] for i in range(count))
    shardings = in_text.removeprefix("in_shardings=")
    if count == 1:
        return f"{target} = jax.device_put({target}, {shardings[1:-2]})"  # the one element of "(x,)"
    return f"{target} = jax.device_put(({target}), {shardings})"


ABSTRACT_INPUTS = ("with_shardings = lambda *args: jax.tree.map(lambda sh, sub: jax.tree.map(lambda a: "
                   "jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding if sh is None else sh), sub), "
                   "in_shardings, args, is_leaf=lambda sh: sh is None or isinstance(sh, NamedSharding))")


def _positional_names(lowered: Any, inputs: tuple[TensorInfo, ...]) -> list[str] | None:
    args = jax_adapter.call_arguments(lowered)
    tree = ArgumentTree(args, jax_adapter.kept_argument_leaves(lowered))
    names = argument_names(inputs, tree, args)
    count = len(list(tree.children(args)))
    if count == 0 or any(i not in names for i in range(count)):
        return None
    return [names[i] for i in range(count)]


def abstract_inputs_text(lowered: Any) -> str | None:
    """The helper that gives abstract inputs (``jax.ShapeDtypeStruct`` with a sharding, the README's
    convention) the suggested shardings, for ``.lower(*with_shardings(params, x))``: jit refuses an
    ``in_shardings=`` that differs from the sharding an argument carries ("Sharding passed to jit does
    not match the sharding on the respective arg"). It maps over ``in_shardings`` as jit reads it, a
    pytree prefix whose ``None`` keeps the argument's own sharding, and names none of the user's
    variables (a script may lower ``step(params, tok, tgt)`` with ``(params, tok, tok)``). None for
    keyword arguments, which it does not take."""
    return None if jax_adapter.has_keyword_arguments(lowered) else ABSTRACT_INPUTS


def jit_options_text(lowered: Any, inputs: tuple[TensorInfo, ...]) -> str | None:
    """The user's donation, kept in the pasted ``jax.jit``: ``donate_argnames=`` by the arguments'
    own names, which jit resolves through the signature (so static arguments, which the lowered
    program does not hold, do not shift it). None where nothing is donated or a name is missing."""
    args = jax_adapter.call_arguments(lowered)
    names = _positional_names(lowered, inputs)
    donated = [all(getattr(leaf, "donated", False) for leaf in _leaves(arg)) and bool(_leaves(arg))
               for arg in args]
    if not any(donated) or names is None or jax_adapter.has_keyword_arguments(lowered):
        return None
    chosen = [n for n, d in zip(names, donated) if d]
    return "donate_argnames=(" + ", ".join(repr(n) for n in chosen) + ("," if len(chosen) == 1 else "") + ")"


def _leaves(arg: Any) -> list:
    import jax

    return jax.tree_util.tree_leaves(arg)


def check_abstract_inputs(text: str, in_text: str, lowered: Any, inputs: tuple[TensorInfo, ...],
                          intended: list) -> str | None:
    """None when the helper, applied to abstract inputs that carry the written shardings, gives every
    leaf jit keeps its intended sharding; else what goes wrong."""
    import jax

    namespace = paste_namespace(lowered, inputs)
    if isinstance(namespace, str):
        return namespace
    try:
        namespace["in_shardings"] = eval(in_text.removeprefix("in_shardings="), namespace)
        exec(text, namespace)  # our own text, built above
        value = namespace["with_shardings"](*namespace["_arguments"])
    except Exception as e:  # the text does not run: JAX's own message says why
        return f"{type(e).__name__}: {e}".splitlines()[0]
    kept = jax_adapter.kept_argument_leaves(lowered)
    flat = [s for k, s in enumerate(jax.tree_util.tree_leaves(value)) if kept is None or k in kept]
    for i, (got, want) in enumerate(zip(flat, intended)):
        axes = None if got.sharding is None else jax_adapter.sharding_axes(got.sharding, len(inputs[i].shape))
        if normalized(axes, len(inputs[i].shape)) != normalized(want, len(inputs[i].shape)):
            return f"{inputs[i].path} would carry {axes}, not {want}"
    return None


def check_text(text: str, lowered: Any, inputs: tuple[TensorInfo, ...], intended: list) -> str | None:
    """None when pasting ``text`` into ``jax.jit`` gives every argument its intended
    sharding; else what goes wrong."""
    import jax

    namespace = paste_namespace(lowered, inputs)
    if isinstance(namespace, str):
        return namespace
    args = jax_adapter.call_arguments(lowered)
    leaves = len(jax.tree_util.tree_leaves(args))
    try:
        value = eval(text.removeprefix("in_shardings="), namespace)  # our own text, built above
        flat = jax_adapter.flatten_out_shardings(value, jax.tree_util.tree_structure(args), leaves)
    except Exception as e:  # the text does not paste: JAX's own message says why
        return f"{type(e).__name__}: {e}".splitlines()[0]
    kept = jax_adapter.kept_argument_leaves(lowered)
    flat = [s for k, s in enumerate(flat) if kept is None or k in kept]  # the module's arguments
    for i, (got, want) in enumerate(zip(flat, intended)):
        axes = None if got is None else jax_adapter.sharding_axes(got, len(inputs[i].shape))
        if normalized(axes, len(inputs[i].shape)) != normalized(want, len(inputs[i].shape)):
            return f"{inputs[i].path} would get {axes}, not {want}"
    return None
