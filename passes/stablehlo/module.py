"""Facts read from a StableHLO module through jaxlib's MLIR bindings: the
``sdy.mesh``es, the entry function's arguments and results with their shardings,
pytree paths and donation, and the user's source line of an op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.device_groups import MeshInfo
from ..common.pytree_paths import path_keys
from ..common.shapes import array_bytes, mlir_dtype_to_hlo
from ..models.entry import EntrySignature
from ..models.report import SourceLocation, TensorInfo
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership

_FRAME = re.compile(r'"((?:[^"\\]|\\.)*)"\("((?:[^"\\]|\\.)+)":(\d+):\d+')
_FILE_LINE = re.compile(r'"((?:[^"\\]|\\.)+)":(\d+):\d+')
_HEX_BYTE = re.compile(r"[0-9A-Fa-f]{2}")
_NAME = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"')


def _mlir_string(text: str) -> str:
    """An MLIR string literal's body: ``\\XX`` hex escapes of UTF-8 bytes, ``\\\\``, ``\\"``."""
    if "\\" not in text:
        return text
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\" and _HEX_BYTE.fullmatch(text, i + 1, i + 3):
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        elif text[i] == "\\" and i + 1 < len(text):
            out += text[i + 1].encode("utf-8")
            i += 2
        else:
            out += text[i].encode("utf-8")
            i += 1
    return out.decode("utf-8", errors="replace")


def frames_of_location(loc: ir.Location | str) -> list[SourceLocation]:
    """The call stack of an MLIR location, innermost frame first."""
    text = str(loc)
    make = SourceLocation.model_construct  # our own parse: no validation on this hot path
    frames = [make(file=_mlir_string(m.group(2)), line=int(m.group(3)), function=m.group(1) or None)
              for m in _FRAME.finditer(text)]
    if frames:
        return frames
    return [make(file=_mlir_string(m.group(1)), line=int(m.group(2)), function=None)
            for m in _FILE_LINE.finditer(text)]


def attribution_of_location(
    loc: ir.Location | str, ownership: CodeOwnership = DEFAULT_OWNERSHIP,
) -> tuple[SourceLocation | None, SourceLocation | None]:
    """(the user's innermost line, the innermost library line) of an MLIR location."""
    text = str(loc)
    hit = ownership.locations.get(text)
    if hit is None:
        hit = ownership.locations[text] = ownership.attribute(frames_of_location(text))
    return hit


def source_of_location(loc: ir.Location | str, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> SourceLocation | None:
    """The innermost user frame of an MLIR location (callee before caller)."""
    return attribution_of_location(loc, ownership)[0]


def op_name_of_location(loc: ir.Location | str) -> str | None:
    m = _NAME.match(str(loc))
    return m.group(1) if m else None


def jitted_function_name(module: ir.Module) -> str | None:
    """The Python name of the function jit lowered (JAX names the module ``jit_NAME``), where it is one a user
    can write (not a lambda's ``_lambda``); None otherwise."""
    attrs = module.operation.attributes
    name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
    function = name.removeprefix("jit_") if name.startswith("jit_") else ""
    return function if function.isidentifier() and "lambda" not in function else None


def read_meshes(module: ir.Module) -> dict[str, MeshInfo]:
    meshes = {}
    for op in module.body.operations:
        if op.operation.name != "sdy.mesh":
            continue
        attr = sdy.MeshAttr(op.operation.attributes["mesh"])
        axes = tuple((sdy.MeshAxisAttr(a).name, int(sdy.MeshAxisAttr(a).size)) for a in attr.axes)
        ids = tuple(int(d) for d in attr.device_ids) or None
        name = ir.StringAttr(op.operation.attributes["sym_name"]).value
        meshes[name] = MeshInfo(axes, ids)
    return meshes


def main_mesh(meshes: dict[str, MeshInfo]) -> tuple[str | None, MeshInfo]:
    """The mesh a module's figures are given on: the one with the most devices. JAX
    puts a scalar's sharding on an ``@empty_mesh`` declared before the real one."""
    if not meshes:
        return None, MeshInfo(())
    return max(meshes.items(), key=lambda kv: (prod(size for _, size in kv[1].axes), len(kv[1].axes)))


def mesh_of_sharding(sharding: sdy.TensorShardingAttr, meshes: dict[str, MeshInfo]) -> MeshInfo:
    """The mesh a sharding names: a symbol (``@mesh``) or a mesh written inline."""
    ref = sharding.mesh_or_ref
    if not sdy.MeshAttr.isinstance(ref):
        return meshes.get(ir.FlatSymbolRefAttr(ref).value, MeshInfo(()))
    attr = sdy.MeshAttr(ref)
    return MeshInfo(tuple((sdy.MeshAxisAttr(a).name, int(sdy.MeshAxisAttr(a).size)) for a in attr.axes),
                    tuple(int(d) for d in attr.device_ids) or None)


def functions(module: ir.Module) -> dict:
    """The module's ``func.func``s by name, in module order."""
    return {
        ir.StringAttr(op.operation.attributes["sym_name"]).value: op
        for op in module.body.operations if op.operation.name == "func.func"
    }


def _is_public(func) -> bool:
    attrs = func.operation.attributes
    return "sym_visibility" not in attrs or ir.StringAttr(attrs["sym_visibility"]).value == "public"


def missing_entry(module: ir.Module) -> str | None:
    """Why a parsed module has no program to analyse (no ``func.func``, or only
    private ones: XLA and Shardy both start from a public entry), or None."""
    funcs = functions(module)
    if not funcs:
        others = sorted({op.operation.name for op in module.body.operations})
        return "it holds no func.func" + (f" (only {', '.join(others[:3])})" if others else "")
    if not any(_is_public(op) for op in funcs.values()):
        names = ", ".join("@" + n for n in list(funcs)[:3])
        return (f"every func.func is private ({names}); XLA and Shardy need a "
                "public entry function (JAX writes func.func public @main)")
    return None


def entry_function(module: ir.Module):
    funcs = functions(module)
    if "main" in funcs:
        return funcs["main"]
    public = [op for op in funcs.values() if _is_public(op)]
    if not public:
        raise ValueError("the module has no public entry function")
    return public[0]


@dataclass(frozen=True)
class DimSharding:
    """One dimension of an ``sdy.sharding``: its axes as (name, sub-axis (pre, size)
    or None for the whole axis), whether it is closed, and its priority."""

    axes: tuple[tuple[str, tuple[int, int] | None], ...]
    closed: bool
    priority: int | None


def read_dims(sharding: sdy.TensorShardingAttr) -> list[DimSharding]:
    """The one reader of a TensorShardingAttr's dimensions through the bindings."""
    out = []
    for dim in sharding.dimension_shardings:
        ds = sdy.DimensionShardingAttr(dim)
        axes = []
        for ax in ds.axes:
            ref = sdy.AxisRefAttr(ax)
            sub = sdy.SubAxisInfoAttr(ref.sub_axis_info) if ref.sub_axis_info is not None else None
            axes.append((ref.name, (int(sub.pre_size), int(sub.size)) if sub else None))
        out.append(DimSharding(tuple(axes), bool(ds.is_closed), ds.priority))
    return out


def dim_axes(dim: DimSharding, axis_sizes: dict[str, int], drop: frozenset[str] = frozenset()):
    """A dimension's axes as (name, pre, size) references (see passes/common/axes.py)."""
    return tuple((name, sub[0], sub[1]) if sub else (name, 1, axis_sizes.get(name, 1))
                 for name, sub in dim.axes if name not in drop)


def sharding_axes(sharding: sdy.TensorShardingAttr) -> list[list[str]]:
    """Mesh axes per dimension, sub-axes in Shardy's ``name:(pre)size`` notation."""
    return [[f"{name}:({sub[0]}){sub[1]}" if sub else name for name, sub in d.axes] for d in read_dims(sharding)]


def axis_label_size(label: str, mesh: MeshInfo) -> int:
    m = re.fullmatch(r"(.+):\((\d+)\)(\d+)", label)
    if m:
        return int(m.group(3))
    return dict(mesh.axes).get(label, 1)


def per_device_bytes(shape: list[int], dtype: str, sharding: list[list[str]] | None, mesh: MeshInfo) -> int:
    if not sharding:
        return array_bytes(dtype, shape)
    local = []
    for dim, axes in zip(shape, sharding):
        ways = prod(axis_label_size(a, mesh) for a in axes) if axes else 1
        local.append(-(-dim // ways))
    return array_bytes(dtype, local)


def _tensor(index: int, path: str, ty: ir.Type, attrs: ir.DictAttr, mesh: MeshInfo, donated: bool) -> TensorInfo:
    if not isinstance(ty, ir.RankedTensorType):
        # A token (jax.debug.print(ordered=True), effects) or a tuple: no array to
        # shard or to count; it keeps its place so indices still match the function's.
        kind = "token" if "token" in str(ty) else "tuple" if str(ty).startswith("tuple") else "opaque"
        return TensorInfo(index=index, path=path, shape=[], dtype=kind, sharding=None, donated=donated,
                          bytes=0, per_device_bytes=0)
    rt = ir.RankedTensorType(ty)
    shape = [int(d) for d in rt.shape]
    dtype = mlir_dtype_to_hlo(str(rt.element_type))
    sharding = None
    if "sdy.sharding" in attrs:
        sharding = sharding_axes(sdy.TensorShardingAttr(attrs["sdy.sharding"]))
    return TensorInfo(
        index=index, path=path, shape=shape, dtype=dtype, sharding=sharding, donated=donated,
        bytes=array_bytes(dtype, shape), per_device_bytes=per_device_bytes(shape, dtype, sharding, mesh),
    )


def read_entry_signature(module: ir.Module) -> EntrySignature:
    meshes = read_meshes(module)
    fn = entry_function(module)
    attrs = module.operation.attributes
    num_partitions = ir.IntegerAttr(attrs["mhlo.num_partitions"]).value if "mhlo.num_partitions" in attrs else 1
    mesh_name, mesh = main_mesh(meshes)
    fn_type = ir.FunctionType(ir.TypeAttr(fn.operation.attributes["function_type"]).value)
    arg_attrs = list(fn.arg_attrs) if "arg_attrs" in fn.operation.attributes else []
    res_attrs = list(fn.result_attrs) if "res_attrs" in fn.operation.attributes else []

    inputs, input_keys, base_index = [], [], {}
    for i, (arg, ty) in enumerate(zip(fn.arguments, fn_type.inputs)):
        a = ir.DictAttr(arg_attrs[i]) if i < len(arg_attrs) else ir.DictAttr.get({}, context=module.context)
        path = op_name_of_location(arg.location) or f"args[{i}]"
        donated = "jax.buffer_donor" in a or "tf.aliasing_output" in a
        inputs.append(_tensor(i, path, ty, a, mesh, donated))
        base, keys = path_keys(path)
        if base == "args" and keys and isinstance(keys[0], int):
            base, keys = f"args[{keys[0]}]", keys[1:]
        base_index.setdefault(base, len(base_index))
        input_keys.append((base_index[base], *keys))

    outputs, output_keys = [], []
    for i, ty in enumerate(fn_type.results):
        a = ir.DictAttr(res_attrs[i]) if i < len(res_attrs) else ir.DictAttr.get({}, context=module.context)
        path = ir.StringAttr(a["jax.result_info"]).value if "jax.result_info" in a else f"result[{i}]"
        outputs.append(_tensor(i, path, ty, a, mesh, False))
        output_keys.append(path_keys(path)[1])
    return EntrySignature(
        mesh_name, mesh, tuple(inputs), tuple(outputs), tuple(input_keys), tuple(output_keys), num_partitions
    )


@dataclass(frozen=True)
class EntrySources:
    """Source lines around the entry function: where it was lowered from, the op
    that first reads each argument, and the op that produces each result."""

    entry: SourceLocation | None
    inputs: tuple[SourceLocation | None, ...]
    outputs: tuple[SourceLocation | None, ...]


def _outermost_source(loc: ir.Location, ownership: CodeOwnership) -> SourceLocation | None:
    frames = [f for f in frames_of_location(loc) if ownership.is_user(f.file)]
    return frames[-1].model_copy(update={"function": None}) if frames else None


def read_entry_sources(module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> EntrySources:
    fn = entry_function(module)
    block = fn.regions[0].blocks[0]
    n_args = len(block.arguments)
    first_use: list[SourceLocation | None] = [None] * n_args
    entry = None
    outputs: list[SourceLocation | None] = []
    for op in block.operations:
        loc = op.location
        src = source_of_location(loc, ownership)
        if entry is None and src is not None:
            entry = _outermost_source(loc, ownership)
        if op.name == "func.return":
            for v in op.operands:
                owner = v.owner
                if isinstance(owner, ir.Block) or not hasattr(owner, "location"):
                    outputs.append(None)
                else:
                    outputs.append(source_of_location(owner.location, ownership))
            continue
        if src is None:
            continue
        for v in op.operands:
            if isinstance(v, ir.BlockArgument):
                i = v.arg_number
                if i < n_args and first_use[i] is None:
                    first_use[i] = src
    return EntrySources(entry, tuple(first_use), tuple(outputs))


def call_site(
    module: ir.Module, program_name: str, ownership: CodeOwnership = DEFAULT_OWNERSHIP,
) -> SourceLocation | None:
    """The user's line that called the jitted function a program was traced from:
    the first user frame outside the outermost frame of that function (``jit_step``
    is function ``step``) in the ops' location chains. Library frames between them
    (``nnx.jit``'s or ``eqx.filter_jit``'s wrappers) are skipped."""
    name = program_name[4:] if program_name.startswith("jit_") else program_name
    wanted = {name, "<lambda>" if name in ("_lambda", "lambda") else name}
    fn = entry_function(module)
    stacks = []
    for op in fn.regions[0].blocks[0].operations:
        frames = frames_of_location(op.location)  # innermost first
        if frames:
            stacks.append(frames)
        inside = [i for i, f in enumerate(frames)
                  if f.function and (f.function.split(".")[-1] in wanted or f.function in wanted)]
        if not inside:
            continue
        outside = [f for f in frames[inside[-1] + 1:] if _written_by_the_user(f, ownership)]
        if outside:
            return outside[0]
    # Locations without function names (JAX's IR dumps): the frames every op shares
    # are the call chain into the program; its innermost user frame is the call. A program
    # of one op (multihost_utils' identity, whose all-gather is its out_sharding) has one chain.
    if not stacks:
        return None
    common: list[SourceLocation] = []
    for frames in zip(*(reversed(st) for st in stacks)):
        if any((f.file, f.line) != (frames[0].file, frames[0].line) for f in frames):
            break
        common.append(frames[0])
    users = [f for f in common if _written_by_the_user(f, ownership)]
    return users[-1] if users else None


def _written_by_the_user(frame: SourceLocation, ownership: CodeOwnership) -> bool:
    # Code exec'd from a string ("<string>": a library's generated wrapper, as transformers' Flax models make)
    # has no file a user could open at that line.
    return ownership.is_user(frame.file) and not frame.file.startswith("<")
