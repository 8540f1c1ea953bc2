"""The ``out_shardings=`` text a user pastes, built from the program's real output
pytree and checked before it is shown.

Paths alone (``result[1][0].mu['w']``) cannot say what container a level is
(optax's ``ScaleByAdamState``, ``EmptyState``, an ``nnx.State``, an Equinox
module), so the text is built from the pytrees JAX kept on the ``Lowered``:

- tuples, lists, dicts and single arrays are written out, each leaf as
  ``NamedSharding(mesh, P(...))`` (for a program of dicts and tuples, the text
  ``check`` builds from the result paths alone, ``out_shardings_text``);
- a subtree of another type (optax's ``ScaleByAdamState``) that is an input
  subtree coming back, leaf for leaf, is a table of its shardings mapped over the
  input's key paths, ``jax.tree_util.tree_map_with_path(lambda path, _: {...}
  [jax.tree_util.keystr(path)], opt_state)``, with the argument names the user's
  function uses;
- a subtree of another type whose leaves need nothing pinned is ``None`` (XLA
  chooses, as it did).

Every sharding is spelled, never ``x.sharding`` of an input: on abstract inputs
(``jax.eval_shape``'s, a ShapeDtypeStruct given no sharding, placed by the jit's
in_shardings) that is None and would pin nothing. lint, check, rewrite and suggest
print their out_shardings from this one builder.

Before a text is shown it is evaluated with the argument names bound to the
abstract inputs without a sharding, matched against the output tree the way
``jax.jit`` matches an ``out_shardings`` prefix (JAX's own code, through
jax_adapter), and each output's resulting sharding compared with the intended
one. A text that fails is not shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...passes.common.pytree_paths import path_keys
from ...passes.common.sharding_text import named_sharding_text, normalized
from ...passes.models.entry import RoundTrip
from ...passes.models.report import TensorInfo
from ...passes.pipelines.entry import changed_roundtrips
from ...passes.pipelines.lint import LINT
from ..adapter import jax_adapter

_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class OutShardingsSuggestion:
    text: str | None
    problem: str | None = None  # why no text is shown


def keys_text(path: tuple) -> str | None:
    """Python for a key path, or None where a key has no Python spelling."""
    import jax

    out = []
    for k in path:
        if isinstance(k, jax.tree_util.SequenceKey):
            out.append(f"[{k.idx}]")
        elif isinstance(k, jax.tree_util.DictKey) and isinstance(k.key, (str, int)):
            out.append(f"[{k.key!r}]")
        elif isinstance(k, jax.tree_util.GetAttrKey) and _IDENTIFIER.match(k.name):
            out.append(f".{k.name}")
        else:
            return None
    return "".join(out)


def path_table_text(node: Any, sharding_text: Any, expr: str) -> str:
    """``jax.tree_util.tree_map_with_path`` over ``expr`` (a Python expression for a pytree with ``node``'s
    structure), looking each leaf's sharding up by its key path relative to ``expr``. The table's keys are
    JAX's own ``keystr`` of ``node``'s key paths, the very strings the pasted lambda computes: an attribute
    key is ``.w``, a custom node's child (a haliax NamedArray's array, jax's FlattenedIndexKey)
    ``[<flat index 0>]``, which the report's paths (``[0]``) do not spell. ``sharding_text``: a leaf of
    ``node`` -> its sharding's Python."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(node)
    table = ", ".join(f"{jax.tree_util.keystr(path)!r}: {sharding_text(leaf)}" for path, leaf in flat)
    return f"jax.tree_util.tree_map_with_path(lambda path, _: {{{table}}}[jax.tree_util.keystr(path)], {expr})"


class ArgumentTree:
    """A pytree whose leaves are numbered in flatten order, walked one level at a time. ``kept``: the
    flattened leaves the compiled module takes (``jit`` prunes arguments the function never reads); a
    leaf's number is then its module argument's, and a pruned leaf has none."""

    def __init__(self, tree: Any, kept: frozenset[int] | None = None):
        import jax

        self.jax = jax
        self.tree = tree
        leaves = jax.tree_util.tree_leaves(tree)
        self.leaves = {id(leaf) for leaf in leaves}
        kept_leaves = [leaf for i, leaf in enumerate(leaves) if kept is None or i in kept]
        self.index = {id(leaf): i for i, leaf in enumerate(kept_leaves)}
        self.n = len(kept_leaves)

    def children(self, node: Any) -> list[tuple[Any, Any]]:
        """(key, child) one level down; None children are kept."""
        flat, _ = self.jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
        return [(path[0], child) for path, child in flat]

    def is_leaf(self, node: Any) -> bool:
        return id(node) in self.leaves

    def is_pruned(self, node: Any) -> bool:
        return id(node) in self.leaves and id(node) not in self.index

    def leaf_range(self, node: Any) -> list[int]:
        """The module arguments under ``node`` (its kept leaves)."""
        return [self.index[id(x)] for x in self.jax.tree_util.tree_leaves(node) if id(x) in self.index]

    def structure(self, node: Any):
        return self.jax.tree_util.tree_structure(node)


def argument_names(inputs: tuple[TensorInfo, ...], args_tree: ArgumentTree, args: Any) -> dict[int, str]:
    """The user's name of each positional argument (``params``), from the
    StableHLO argument paths, where the function's signature gave one."""
    names: dict[int, str] = {}
    for i, (_, arg) in enumerate(args_tree.children(args)):
        leaves = args_tree.leaf_range(arg)
        if not leaves or leaves[0] >= len(inputs):
            continue
        base, _ = path_keys(inputs[leaves[0]].path)
        if base and base != "args" and _IDENTIFIER.match(base):
            names[i] = base
    return names


def _input_subtrees(args_tree: ArgumentTree, args: Any, names: dict[int, str]) -> list[tuple[int, Any, str]]:
    """Every spellable input subtree with a leaf the module takes: (its first leaf, structure, Python expression)."""
    out: list[tuple[int, Any, str]] = []

    def walk(node, expr):
        leaves = args_tree.leaf_range(node)
        if leaves:
            out.append((leaves[0], args_tree.structure(node), expr))
        if args_tree.is_leaf(node) or node is None:
            return
        for key, child in args_tree.children(node):
            text = keys_text((key,))
            if text is not None:
                walk(child, expr + text)

    for i, (_, arg) in enumerate(args_tree.children(args)):
        if i in names:
            walk(arg, names[i])
    return out


def build_text(
    lowered: Any, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...], intended: list,
    pair_of: dict[int, int],
) -> str:
    """The text for ``intended`` shardings (mesh axes per dim, per flattened output), every one spelled."""
    args, out_info = jax_adapter.call_arguments(lowered), lowered.out_info  # out_info is rebuilt on every access
    args_tree, out_tree = ArgumentTree(args, jax_adapter.kept_argument_leaves(lowered)), ArgumentTree(out_info)
    names = argument_names(inputs, args_tree, args)
    subtrees = _input_subtrees(args_tree, args, names)

    def same_as_input(node) -> str | None:
        """A table of the subtree's shardings mapped over an input of its structure: the input it is, coming
        back, where there is one (``pair_of``), else any (gradients mapped over the params they are of)."""
        leaves = out_tree.leaf_range(node)
        if not leaves:
            return None
        structure = out_tree.structure(node)
        alike = [(first, expr) for first, in_structure, expr in subtrees if in_structure == structure]
        if not alike:
            return None
        expr = next((expr for first, expr in alike if pair_of.get(leaves[0]) == first), alike[0][1])

        def sharding_text(leaf) -> str:
            s = intended[out_tree.index[id(leaf)]]
            return named_sharding_text(s) if s is not None else "None"

        return path_table_text(node, sharding_text, expr)

    def render(node) -> str:
        if node is None:
            return "None"
        if out_tree.is_leaf(node):
            s = intended[out_tree.index[id(node)]]
            return named_sharding_text(s) if s is not None else "None"
        kids = out_tree.children(node)
        if type(node) is tuple:
            items = [render(c) for _, c in kids]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if type(node) is list:
            return "[" + ", ".join(render(c) for _, c in kids) + "]"
        if type(node) is dict:
            return "{" + ", ".join(f"{k.key!r}: {render(c)}" for k, c in kids) + "}"
        expr = same_as_input(node)
        if expr is not None:
            return expr
        leaves = out_tree.leaf_range(node)
        if all(normalized(intended[o], len(outputs[o].shape)) == normalized(outputs[o].sharding, len(outputs[o].shape))
               for o in leaves):
            return "None"  # nothing to pin in a container we cannot spell
        raise ValueError(f"output subtree of type {type(node).__name__} needs pinning, and no argument has its "
                         "structure to map its shardings over")

    return "out_shardings=" + render(out_info)


def paste_namespace(lowered: Any, inputs: tuple[TensorInfo, ...],
                    sharded: bool = True) -> dict[str, Any] | str:
    """What a pasted text may name: ``jax``, ``NamedSharding``, ``P``, ``mesh`` and each
    argument's own name bound to its abstract input on ``inputs``' shardings (``sharded``;
    else with none: a text that must not read them); a str says why there is none."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax_adapter.lowered_mesh(lowered)
    if mesh is None:
        return "the program has no named mesh"
    args = jax_adapter.call_arguments(lowered)
    args_tree = ArgumentTree(args, jax_adapter.kept_argument_leaves(lowered))
    if len(inputs) != args_tree.n:
        return "the inputs do not match the program's argument tree"
    # A typed PRNG key (an nnx.Rngs key, key<fry>[2]) is one more dimension in the module (u32[2,2]): its
    # key data, never sharded; the leaf takes the leading dimensions' sharding.
    flat_inputs = [  # a leaf jit pruned is bound without a sharding: the program never reads it
        jax.ShapeDtypeStruct(tuple(leaf.shape), jax_adapter.arg_info_dtype(leaf))
        if args_tree.is_pruned(leaf) or not sharded else
        jax.ShapeDtypeStruct(tuple(leaf.shape), jax_adapter.arg_info_dtype(leaf), sharding=NamedSharding(
            mesh, P(*[tuple(a) if a else None
                      for a in (inputs[args_tree.index[id(leaf)]].sharding or [])[:len(leaf.shape)]])))
        for leaf in jax.tree_util.tree_leaves(args)
    ]
    bound = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(args), flat_inputs)
    # "_arguments": every argument, named or not, for a check that calls a pasted helper on them all.
    namespace: dict[str, Any] = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, "_arguments": bound}
    for i, name in argument_names(inputs, args_tree, args).items():
        namespace[name] = bound[i]
    return namespace


def check_out_shardings_text(
    text: str, lowered: Any, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...], intended: list,
    sharded: bool = True,
) -> str | None:
    """None when pasting ``text`` into ``jax.jit`` gives every output its intended
    sharding; else what goes wrong. ``sharded``: the inputs arrive on ``inputs``' shardings;
    else they are bound with none (abstract), and the text must give every output its own."""
    namespace = paste_namespace(lowered, inputs, sharded)
    if isinstance(namespace, str):
        return namespace
    try:
        value = eval(text.removeprefix("out_shardings="), namespace)  # our own text, built above
        flat = jax_adapter.flatten_out_shardings(value, lowered.out_tree, len(outputs))
    except Exception as e:  # the text does not paste: JAX's own message says why
        return f"{type(e).__name__}: {e}".splitlines()[0]
    for o, (got, want) in enumerate(zip(flat, intended)):
        if got is None:
            if normalized(want, len(outputs[o].shape)) != normalized(outputs[o].sharding, len(outputs[o].shape)):
                return f"{outputs[o].path} would be left to XLA"
            continue
        axes = jax_adapter.sharding_axes(got, len(outputs[o].shape))
        if normalized(axes, len(outputs[o].shape)) != normalized(want, len(outputs[o].shape)):
            return f"{outputs[o].path} would get {axes}, not {want}"
    return None


def suggest(
    lowered: Any, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...],
    roundtrips: tuple[RoundTrip, ...],
) -> OutShardingsSuggestion:
    """The checked ``out_shardings=`` text pinning every state output to its
    input's layout; text None when nothing needs pinning or nothing checks."""
    fixes = {rt.output.index: rt.input.sharding for rt in changed_roundtrips(roundtrips, LINT)}
    if not fixes:
        return OutShardingsSuggestion(None)
    intended = [fixes.get(o.index, o.sharding) for o in outputs]
    pair_of = {rt.output.index: rt.input.index for rt in roundtrips}
    return suggest_for(lowered, inputs, outputs, intended, pair_of)


def suggest_for(
    lowered: Any, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...], intended: list,
    pair_of: dict[int, int],
) -> OutShardingsSuggestion:
    """The checked text giving each output its ``intended`` sharding (see ``build_text``; its check binds
    the inputs with no sharding, so the text cannot lean on them)."""
    try:
        text = build_text(lowered, inputs, outputs, intended, pair_of)
    except (ValueError, TypeError, AttributeError) as e:
        return OutShardingsSuggestion(None, f"no out_shardings text could be built: {e}")
    problem = check_out_shardings_text(text, lowered, inputs, outputs, intended, sharded=False)
    if problem is not None:
        return OutShardingsSuggestion(None, f"the out_shardings text did not check ({problem}); not shown")
    return OutShardingsSuggestion(text)
