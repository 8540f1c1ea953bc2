"""Loading scripts and fixtures, lowering, compiling, rewriting, running."""

__version__ = "0.1.0"


def __getattr__(name):
    # ``jax_shard_lint.analyzer.mesh`` without importing JAX with the package.
    if name == "mesh":
        from .platforms.devices import mesh

        return mesh
    raise AttributeError(name)
