"""Pytree paths as JAX prints them (``state['w'][0]``), split into their keys."""

from __future__ import annotations

import re

_PATH_KEY = re.compile(r"\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]|\.(\w+)")


def path_keys(path: str) -> tuple[str, tuple[str | int, ...]]:
    """Split a pytree path like ``state['w'][0]`` into (``state``, ('w', 0))."""
    m = re.match(r"^[A-Za-z_]\w*", path)
    base = m.group(0) if m else ""
    keys: list[str | int] = []
    for km in _PATH_KEY.finditer(path, len(base)):
        if km.group(1) is not None:
            keys.append(int(km.group(1)))
        else:
            keys.append(next(g for g in km.groups()[1:] if g is not None))
    return base, tuple(keys)


def argument_name(path: str) -> str:
    """The jit argument a leaf's path starts with: ``params`` of ``params.embed.weight`` (an Equinox module's
    attributes) as of ``params['w']``, ``args[1]`` of a positional argument's ``args[1][0]``."""
    base, keys = path_keys(path)
    return f"args[{keys[0]}]" if base == "args" and keys and isinstance(keys[0], int) else base


# A path's argument and its positional indices: ``opt_state[0]`` of ``opt_state[0]['mu']['embed']``.
_ROOT = re.compile(r"^[^\[]*(?:\[\d+\])*")


# An argument's name and its positional indices, where the leaf's keys are attributes alone (an Equinox
# module's ``model.embed.weight[0]``, whose whole path _ROOT takes).
_NAME_ROOT = re.compile(r"^[A-Za-z_]\w*(?:\[\d+\])*")


def key_path(path: str) -> str:
    """``opt_state['mu']['embed']`` -> ``['mu']['embed']``; ``result[0]['embed']`` -> ``['embed']``: a leaf's
    keys below its argument, by which a parameter and the optimizer state that mirrors it match. A path of
    attributes alone keeps them below its argument's name: ``model.embed.weight[0]`` -> ``.embed.weight[0]``,
    which optax's ``opt_state[0].mu.embed.weight[0]`` ends with (haliax, newbie19 F6: one parameter and its two
    Adam moments were three SL203 findings)."""
    return _ROOT.sub("", path, count=1) or _NAME_ROOT.sub("", path, count=1)


# A layer's index in a path: a string key of digits (flax's ['3']), or an index after layers, blocks or h.
_LAYER_KEY = re.compile(r"\[(?:'\d+'|\"\d+\")\]|(?<=layers)\[\d+\]|(?<=blocks)\[\d+\]|(?<=h)\[\d+\]")


def layer_pattern(path: str) -> str:
    """``params['h']['3']['attn']['kernel']`` -> ``params['h'][*]['attn']['kernel']``."""
    return _LAYER_KEY.sub("[*]", path)


def natural_order(text: str) -> tuple[int | str, ...]:
    """A sort key that orders the numbers in names as numbers (all-gather.9 before all-gather.14, layers[2]
    before layers[10])."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
