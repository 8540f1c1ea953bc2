"""A long list of state paths as a fix text says it: by key path, each layer's collapsed to [*] (as grouped
findings name them), with a count; the finding's ``ops`` keep every path for JSON."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ...passes.common.pytree_paths import layer_pattern
from .parameter_moves import listed

# Up to this many paths are named one by one; a longer list is summarized.
_NAMED = 4
# The key paths a summary names before "and N more".
_SHOWN = 3
# A path's argument (``params``, ``opt_state[0].mu``): everything before its first string key.
_ROOT = re.compile(r"^(.*?)(?=\[['\"])")
# A path's first name (empty where it starts with a key), and its parts after it: attributes and indices
# (``opt_state`` ``[0]`` ``.mu`` ``.mlp`` ...).
_HEAD = re.compile(r"^\w*")
_PART = re.compile(r"\.\w+|\[[^\]]*\]")


def summarized_paths(paths: Sequence[str]) -> str:
    """``a, b and c`` for a few paths; for many, the count, the arguments they are under and their key paths
    with layers as [*], the most common first: ``the 66 state inputs under params, opt_state[0].mu and
    opt_state[0].nu (24 key paths, layers as [*]: ['bert']['encoder']['layer'][*]['output']['dense']['bias']
    (x6), ... and 21 more)``."""
    if len(paths) <= _NAMED:
        return listed(list(paths))
    roots: dict[str, None] = {}
    keys: Counter[str] = Counter()
    attribute_roots = _attribute_roots(paths)
    for path in paths:
        m = _ROOT.match(path)
        root = m.group(1) if m else attribute_roots[path]
        roots.setdefault(root, None)
        keys[layer_pattern(path[len(root):])] += 1
    ranked = sorted(keys.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{k} (x{n})" if n > 1 else k for k, n in ranked[:_SHOWN]]
    more = [f"{len(ranked) - _SHOWN} more"] if len(ranked) > _SHOWN else []
    return (f"the {len(paths)} state inputs under {listed(list(roots))} ({len(ranked)} key path"
            f"{'s' if len(ranked) > 1 else ''}, layers as [*]: {listed(shown + more)})")


def _attribute_roots(paths: Sequence[str]) -> dict[str, str]:
    """Each path's argument where its keys are attributes (equinox modules, optax states:
    ``opt_state[0].mu.mlp.layers[2].weight``), which have no string key to end it: the path less the longest
    run of trailing parts it shares with a path under another name (``params.mlp.layers[2].weight``: the
    argument is ``opt_state[0].mu``); its first name where it shares none."""
    split = {}
    for path in paths:
        m = _HEAD.match(path)
        head = m.group(0) if m else ""
        split[path] = (head, _PART.findall(path[len(head):]))
    names: dict[tuple[str, ...], set[str]] = {}
    for head, parts in split.values():
        for k in range(1, len(parts) + 1):
            names.setdefault(tuple(parts[-k:]), set()).add(head)
    out = {}
    for path, (head, parts) in split.items():
        shared = max((k for k in range(1, len(parts) + 1) if len(names[tuple(parts[-k:])]) > 1), default=0)
        out[path] = head + "".join(parts[:len(parts) - shared]) if shared else head
    return out
