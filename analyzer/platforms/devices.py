"""The devices a run compiles for, and the mesh scripts build over them.

The tool selects devices before it imports a script: virtual CPU devices, the
GPUs JAX sees, or compile-only devices of a GPU target. A script receives them
as ``shard_lint_targets(mesh_devices=...)`` when it takes that parameter, or
builds its mesh with :func:`mesh`; a plain ``jax.make_mesh`` script keeps
working on the CPU platform.
"""

from __future__ import annotations

from collections.abc import Sequence

_selected: list | None = None


def select(devices: list | None) -> None:
    global _selected
    _selected = list(devices) if devices is not None else None


def selected() -> list:
    import jax

    return list(_selected) if _selected is not None else list(jax.devices())


def mesh(shape: Sequence[int], names: Sequence[str], axis_types=None):
    """A mesh of ``shape`` with axis ``names`` over the devices this run selected
    (all of JAX's devices when used outside the tool). Axes are Auto by default,
    so XLA propagates shardings."""
    import math

    import numpy as np
    from jax.sharding import AxisType, Mesh

    devices = selected()
    n = math.prod(shape)
    if n > len(devices):
        raise ValueError(f"a mesh of {tuple(shape)} needs {n} devices; {len(devices)} are selected")
    types = axis_types or (AxisType.Auto,) * len(shape)
    return Mesh(np.array(devices[:n], dtype=object).reshape(tuple(shape)), tuple(names), axis_types=types)
