"""The distributions whose releases say what compiles a program: jax, jaxlib and the
XLA plugins beside them (a TPU compile is libtpu's, a GPU compile the CUDA plugin's).
One list for the analysis cache's key, gate's baseline and a Ray worker's answer.

Imports no JAX: a Ray worker reads the releases without loading it."""

from __future__ import annotations

from collections.abc import Iterable

COMPILER_PLUGINS = ("libtpu", "jax-cuda12-plugin", "jax-cuda13-plugin")
COMPILER_DISTRIBUTIONS = ("jax", "jaxlib", *COMPILER_PLUGINS)


def installed_releases(names: Iterable[str]) -> dict[str, str]:
    """Each installed distribution of ``names`` -> its release, in the order named."""
    from importlib import metadata

    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found
