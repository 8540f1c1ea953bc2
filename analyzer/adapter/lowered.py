"""What a ``jax.stages.Lowered`` program says beyond its StableHLO text: its mesh, its
arguments in jit's order, the devices it was lowered for, what ``out_shardings``
becomes; and which frames JAX records in the op locations it lowers.

Private pieces used:
- the devices and compile arguments of a Lowered program (``Lowered._lowering._device_list``,
  ``_lowering.compile_args``) and the dtype of its argument leaves (``_aval``);
- which frames JAX records in op locations (``jax._src.source_info_util._exclude_paths``);
- how ``jit`` matches an ``out_shardings`` pytree prefix to the output tree
  (``jax._src.sharding_impls.prepare_axis_resources``, ``jax._src.api_util.flatten_axis_resources``).
"""

from __future__ import annotations

import os
from typing import Any

from .devices import device_identity
from .native_stderr import quiet_native_stderr

with quiet_native_stderr():
    import jax


def sharding_axes(sharding: Any, rank: int) -> list[list[str]] | None:
    """Mesh axes per dimension of a NamedSharding; None for other shardings."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return None
    dims: list[list[str]] = []
    for entry in tuple(spec)[:rank]:
        if entry is None:
            dims.append([])
        elif isinstance(entry, str):
            dims.append([entry])
        elif isinstance(entry, tuple):
            dims.append([str(a) for a in entry])
        else:  # PartitionSpec.UNCONSTRAINED and friends: not a fixed layout
            return None
    return dims + [[] for _ in range(rank - len(dims))]


def record_library_frames() -> None:
    """Make JAX record the frames of installed libraries (flax, optax, ...) in op
    locations, as it does in a virtual environment.

    JAX drops frames under the standard library's folder, which on a pyenv or
    system Python contains site-packages, so there it drops every library frame;
    flax also registers its own files. The tool decides whose code a frame is
    itself (passes/source/frames.py) and needs the library frames for ``via``: keep JAX's
    own exclusion and the standard library's, less the package folders inside it.
    """
    from jax._src import source_info_util as siu

    if siu._exclude_paths == _RECORDED_EXCLUSIONS:
        return  # fit calls this per probe: nothing registered since the last call
    jax_root = os.path.dirname(os.path.dirname(os.path.abspath(siu.__file__))) + os.sep
    kept: list[str] = []
    for path in list(siu._exclude_paths):
        parts = path.replace("\\", "/").split("/")
        if path.startswith(jax_root):
            kept.append(path)
        elif "site-packages" in parts or "dist-packages" in parts:
            continue  # a library's own exclusion (flax registers its files)
        elif os.path.isdir(os.path.join(path, "site-packages")) or os.path.isdir(os.path.join(path, "dist-packages")):
            for child in sorted(os.listdir(path)):
                if child not in ("site-packages", "dist-packages"):
                    full = os.path.join(path, child)
                    kept.append(full + os.sep if os.path.isdir(full) else full)
        else:
            kept.append(path)
    if kept != siu._exclude_paths:
        siu._exclude_paths[:] = kept
        siu._exclude_path_regex.cache_clear()
        siu.is_user_filename.cache_clear()
        siu.user_frame.cache_clear()
    _RECORDED_EXCLUSIONS[:] = kept


_RECORDED_EXCLUSIONS: list[str] = []  # JAX's exclusions as record_library_frames last left them


def flatten_out_shardings(value: Any, out_tree: Any, n_outputs: int) -> list[Any]:
    """What ``jax.jit(f, out_shardings=value)`` makes of ``value`` for outputs of
    tree ``out_tree``: one Sharding (or None, unspecified) per flattened output.
    Raises ValueError with JAX's own message where jit would reject it."""
    from jax._src.api_util import flatten_axis_resources
    from jax._src.sharding_impls import UnspecifiedValue, prepare_axis_resources

    prepared = prepare_axis_resources(value, "out_shardings")
    if prepared is None or isinstance(prepared, (UnspecifiedValue, jax.sharding.Sharding)):
        flat = [prepared] * n_outputs
    else:
        flat = list(flatten_axis_resources("pjit out_shardings", out_tree, prepared, tupled_args=False))
    return [None if isinstance(s, UnspecifiedValue) else s for s in flat]


def lowered_mesh(lowered: Any) -> Any:
    """The concrete Mesh of a Lowered program's NamedShardings, or None."""
    args = lowered._lowering.compile_args
    for s in (*args.get("in_shardings", ()), *args.get("out_shardings", ())):
        mesh = getattr(s, "mesh", None)
        if isinstance(mesh, jax.sharding.Mesh):
            return mesh
    return None


def call_arguments(lowered: Any) -> tuple:
    """The arguments of a lowered call as one tuple whose leaves flatten in jit's order: the
    positional ones, then the keyword ones by name (jit flattens ``(args, kwargs)``, and a dict's
    leaves come in sorted key order), so the module's argument numbers index both alike."""
    args, kwargs = lowered.args_info
    return tuple(args) + tuple(kwargs[k] for k in sorted(kwargs))


def keyword_argument_names(lowered: Any) -> dict[int, str]:
    """Position in ``call_arguments`` -> keyword, for the arguments passed by keyword."""
    args, kwargs = lowered.args_info
    return {len(args) + i: k for i, k in enumerate(sorted(kwargs))}


def has_keyword_arguments(lowered: Any) -> bool:
    """Whether the target was lowered with keyword arguments (jit then takes no in_shardings)."""
    return bool(lowered.args_info[1])


def kept_argument_leaves(lowered: Any) -> frozenset[int] | None:
    """The flattened argument leaves the compiled module takes: ``jit`` prunes the ones the function never
    reads (MaxText's ``targets_position``), and the module's arguments are the rest, in order. None: all."""
    kept = lowered._lowering.compile_args.get("kept_var_idx")
    return None if kept is None else frozenset(kept)


def donated_argument_leaves(lowered: Any) -> frozenset[int]:
    """The module's arguments (numbered as the module numbers them, after jit's pruning) the user donated.
    jit leaves a donation no output matches out of the module (it only warns), so the module alone cannot say."""
    import jax

    flags = [bool(getattr(a, "donated", False)) for a in jax.tree_util.tree_leaves(call_arguments(lowered))]
    kept = kept_argument_leaves(lowered)
    leaves = [i for i in range(len(flags)) if kept is None or i in kept]
    return frozenset(k for k, i in enumerate(leaves) if flags[i])


def arg_info_dtype(info: Any) -> Any:
    """The dtype of one leaf of ``Lowered.args_info``."""
    return info._aval.dtype


def device_assignment(lowered: Any) -> list:
    """The devices a Lowered program was lowered for, in logical-id order."""
    try:
        return list(lowered._lowering._device_list)
    except (AttributeError, TypeError):
        return []


def lowered_identity(lowered: Any) -> dict[str, Any]:
    """What a compile of ``lowered`` depends on beyond its StableHLO text: the devices it
    is placed on (ids, kind, host) and its argument and result pytrees (the paths a report
    names). Plain JSON, for the analysis cache's key."""
    devices = device_identity(device_assignment(lowered))
    trees: dict[str, str | None] = {}
    for name in ("in_tree", "out_tree"):
        try:
            trees[name] = str(getattr(lowered, name))
        except Exception:  # noqa: BLE001 - a stage without the attribute: the text alone keys it
            trees[name] = None
    try:
        donated = sorted(donated_argument_leaves(lowered))
    except Exception:  # noqa: BLE001 - a stage without args_info: the text alone keys it
        donated = None
    return {"devices": devices, **trees, "donated": donated}


def deserialize_export(data: bytes) -> Any:
    """A ``jax.export`` artifact; deserialising runs no Python from it."""
    from jax import export

    return export.deserialize(bytearray(data))
