"""Every use of JAX's private APIs, in one place, so a JAX upgrade touches one file.

Private pieces used:
- the MLIR context JAX builds for its own modules (``jax._src.interpreters.mlir.make_ir_context``);
- whether backends are initialised (``jax._src.xla_bridge.backends_are_initialized``);
- compiling StableHLO text without re-tracing Python (``jax._src.compiler.get_compile_options`` and
  ``backend_compile_and_load``) and running the result (``execute_sharded``);
- turning XLA's OpShardings back into NamedShardings (``jax._src.sharding_impls.GSPMDSharding``,
  ``_gspmd_to_named_sharding_via_mesh``);
- the devices a Lowered program was lowered for (``Lowered._lowering._device_list``);
- which frames JAX records in op locations (``jax._src.source_info_util._exclude_paths``);
- how ``jit`` matches an ``out_shardings`` pytree prefix to the output tree
  (``jax._src.sharding_impls.prepare_axis_resources``, ``jax._src.api_util.flatten_axis_resources``).
Everything else here is public API, kept beside them because it names XLA's
file layout (dump file names), which also changes between versions.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...passes.hlo.involuntary_remat import is_partitioner_warning
from .native_stderr import capture_native_stderr, quiet_native_stderr

with quiet_native_stderr():
    import jax
    import jaxlib
    from jaxlib.mlir import ir


def versions() -> tuple[str, str]:
    return jax.__version__, jaxlib.__version__


# The compilers' own distributions, beside jaxlib: a TPU compile is libtpu's, a GPU compile the CUDA plugin's.
_COMPILER_DISTRIBUTIONS = ("libtpu", "jax-cuda12-plugin", "jax-cuda13-plugin")


def compiler_versions() -> dict[str, str]:
    """The releases that compile a program here: jax, jaxlib, and each installed XLA plugin."""
    from importlib import metadata

    found = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
    for name in _COMPILER_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def make_ir_context() -> ir.Context:
    """An MLIR context with every dialect JAX emits (stablehlo, sdy, chlo, func, ...)."""
    from jax._src.interpreters import mlir as jax_mlir

    return jax_mlir.make_ir_context()


def parse_stablehlo(text: str, context: ir.Context | None = None) -> ir.Module:
    """Parse StableHLO text; the module keeps its context alive."""
    ctx = context or make_ir_context()
    with ctx:
        return ir.Module.parse(text)


def backends_initialized() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def stablehlo_text(lowered: Any) -> str:
    """The lowered module with shardings and source locations."""
    return lowered.as_text(debug_info=True)


def stablehlo_module(lowered: Any) -> ir.Module:
    """The lowered module itself (no print and re-parse). Passes only read it;
    anything that rewrites works on a clone."""
    return lowered.compiler_ir("stablehlo")


@dataclass(frozen=True)
class CompiledProgram:
    compiled: Any
    hlo_text: str
    memory: dict[str, int] | None
    live_range_text: str | None
    buffer_assignment_text: str | None
    output_shardings: tuple[Any, ...]  # flattened jax.sharding.Sharding leaves
    input_shardings: tuple[Any, ...]
    cost: dict[str, Any] | None = None  # XLA's cost_analysis(), where the backend gives one
    # What XLA's SPMD partitioner warned while compiling ("Involuntary full rematerialization").
    compiler_warnings: str = ""


def _cost_dict(compiled: Any) -> dict[str, Any] | None:
    try:
        cost = compiled.cost_analysis()
    except Exception:  # backends without a cost model raise (or return None: compile-only GPU targets)
        return None
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
        cost = cost[0] if cost else None
    return dict(cost) if isinstance(cost, dict) else None


def _read_dump(dump_dir: str, suffix: str) -> str | None:
    # XLA names these <module>.<platform>_after_optimizations-<report>.txt (CPU) or
    # <module>.sm_9.0_gpu_after_optimizations-<report>.txt (GPU).
    files = sorted(glob.glob(os.path.join(dump_dir, f"*after_optimizations-{suffix}.txt")))
    if not files:
        return None
    with open(files[-1], encoding="utf-8") as f:
        return f.read()


def _memory_dict(compiled: Any) -> dict[str, int] | None:
    try:
        stats = compiled.memory_analysis()
    except Exception:  # backends without memory analysis raise NotImplementedError or XlaRuntimeError
        return None
    if stats is None:
        return None
    return {
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "alias_bytes": int(stats.alias_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
    }


def _flat_shardings(tree: Any) -> tuple[Any, ...]:
    return tuple(jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding)))


def compile_lowered(lowered: Any, with_reports: bool = True) -> CompiledProgram:
    """Compile a ``jax.stages.Lowered``; with reports, XLA also writes its
    buffer-assignment and live-range reports, which are read back here.

    ``configure_devices`` turns the persistent compilation cache off: a cache hit
    writes no dumps.
    """
    options: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jax-shard-lint-") as dump_dir:
        if with_reports:
            options["xla_dump_to"] = dump_dir
        with capture_native_stderr(is_partitioner_warning) as warned:
            compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
        live = _read_dump(dump_dir, "live-range") if with_reports else None
        buffers = _read_dump(dump_dir, "buffer-assignment") if with_reports else None
    try:
        outs = _flat_shardings(compiled.output_shardings)
    except Exception:
        outs = ()
    try:
        ins = _flat_shardings(compiled.input_shardings[0])
    except Exception:
        ins = ()
    return CompiledProgram(compiled, compiled.as_text(), _memory_dict(compiled), live, buffers, outs, ins,
                           _cost_dict(compiled), warned.text)


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


def arg_info_dtype(info: Any) -> Any:
    """The dtype of one leaf of ``Lowered.args_info``."""
    return info._aval.dtype


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """JAX logs a CUDA plugin that fails to load with its traceback (through Python's
    logging, which the native guard does not hold back): the caller says it in a line."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def configure_devices(platform: str, num_cpu_devices: int) -> None:
    """Select the platform and the number of virtual CPU devices before JAX
    initialises its backends. Raises RuntimeError when that is too late."""
    jax.config.update("jax_enable_compilation_cache", False)
    if backends_initialized():
        if platform == "cpu" and len(jax.devices("cpu")) != num_cpu_devices:
            raise RuntimeError(
                f"JAX is already initialised with {len(jax.devices('cpu'))} CPU devices; "
                f"{num_cpu_devices} were asked for"
            )
        return
    if platform == "cpu":
        # --devices is authoritative: a device count in XLA_FLAGS would fight it.
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = " ".join(
            f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count")
        )
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", num_cpu_devices)
    elif platform == "gpu":
        jax.config.update("jax_platforms", "cuda")
    else:  # a deviceless GPU target: compiles need the CUDA plugin, executions the CPU
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", num_cpu_devices)
    with quiet_native_stderr(), _quiet_logger("jax._src.xla_bridge"):
        try:
            jax.devices()
        except (RuntimeError, AssertionError):  # jax 0.10 asserts when the CUDA plugin fails to load
            if platform == "gpu":
                # No CUDA backend: fall back to the CPU so that JAX stays usable and the
                # caller can say there is no GPU (an uninitialised backend only asserts).
                jax.config.update("jax_platforms", "cpu")
            # Otherwise reported where the devices are needed.


def gpu_target_devices(spec_text: str, num_devices: int, hosts: int = 1) -> list:
    """Compile-only devices of a GPU target described by a GpuTargetConfigProto
    text, over ``hosts`` hosts (devices carry their process_index).
    Raises ImportError without the CUDA PJRT plugin."""
    from jax.experimental import topologies

    try:
        import jax_plugins.xla_cuda12  # noqa: F401
    except ImportError as e:
        raise ImportError("the CUDA PJRT plugin (jax-cuda12-plugin) is not installed") from e
    with quiet_native_stderr():
        topology = topologies.get_topology_desc(
            "", platform="cuda", topology=f"1x{hosts}x{num_devices // hosts}", target_config=spec_text,
        )
    return list(topology.devices)


def tpu_target_devices(topology_name: str, accelerator_type: str) -> list:
    """Compile-only devices of a TPU topology (``v5e:2x4``) through libtpu.
    Raises ImportError without libtpu.

    libtpu reads what pod it runs in from the environment and prints warnings
    when that is unset; on a machine without TPUs there is no pod, so a
    single-host value is given (only where the user has not set one)."""
    import importlib.util

    from jax.experimental import topologies

    if importlib.util.find_spec("libtpu") is None:
        raise ImportError("libtpu is not installed")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", accelerator_type)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    with quiet_native_stderr():
        topology = topologies.get_topology_desc(topology_name=topology_name, platform="tpu")
    # libtpu lists each TensorCore of a v4 chip; JAX runs v4 (and v5p) as megacore,
    # one device per chip, and builds meshes only over those.
    return [d for d in topology.devices if getattr(d, "core_on_chip", 0) == 0]


def gpu_devices() -> list:
    """The GPUs JAX sees; empty when there are none or no CUDA backend is installed."""
    try:
        return [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        return []


def device_kind_summary() -> str:
    devices = jax.devices()
    kinds = sorted({d.device_kind for d in devices})
    return f"{len(devices)} x {', '.join(kinds)}"


def _name_for_xla(module: ir.Module) -> None:
    """XLA's import wants a named module whose entry is ``@main``: a module written
    by hand (or by another tool) may have neither, which is no reason to refuse it."""
    from ...passes.stablehlo.module import entry_function, functions

    attrs = module.operation.attributes
    with module.context:
        if "sym_name" not in attrs:
            attrs["sym_name"] = ir.StringAttr.get("module")
        if "main" not in functions(module):
            entry = entry_function(module)
            old = ir.StringAttr(entry.operation.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(old, "main", module.operation)
            entry.operation.attributes["sym_name"] = ir.StringAttr.get("main")


def compile_stablehlo_text(
    text: str, num_partitions: int, mesh_axes: tuple[tuple[str, int], ...] = (),
    device_ids: tuple[int, ...] | None = None, with_reports: bool = True, devices: list | None = None,
) -> CompiledProgram:
    """Compile StableHLO text (with Shardy shardings) for ``devices`` (default: the
    first ``num_partitions`` of the default backend), without re-tracing Python.
    Compile-only devices of a GPU target give an executable that cannot run.

    Output shardings come back as NamedShardings over a mesh with ``mesh_axes``
    (device order ``device_ids``, the sdy.mesh's), so they read like the user's.
    """
    import numpy as np
    from jax._src import compiler
    from jax._src.lib import xla_client as xc
    from jax._src.sharding_impls import GSPMDSharding, _gspmd_to_named_sharding_via_mesh

    pool = list(devices) if devices is not None else jax.devices()
    devices = pool[:num_partitions]
    if len(devices) < num_partitions:
        raise ValueError(f"the program needs {num_partitions} devices and {len(pool)} are selected")
    backend = devices[0].client  # a compile-only client for a GPU target's devices
    with tempfile.TemporaryDirectory(prefix="jax-shard-lint-") as dump_dir:
        overrides = {"xla_dump_to": dump_dir} if with_reports else None
        options = compiler.get_compile_options(
            num_replicas=1, num_partitions=num_partitions,
            device_assignment=np.array(devices).reshape(1, num_partitions), env_options_overrides=overrides,
        )
        options.executable_build_options.use_spmd_partitioning = True
        module = parse_stablehlo(text)
        _name_for_xla(module)
        executable = compiler.backend_compile_and_load(backend, module, xc.DeviceList(tuple(devices)), options, [])
        live = _read_dump(dump_dir, "live-range") if with_reports else None
        buffers = _read_dump(dump_dir, "buffer-assignment") if with_reports else None
    stats = executable.get_compiled_memory_stats()
    memory = {
        "argument_bytes": int(stats.argument_size_in_bytes), "output_bytes": int(stats.output_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes), "alias_bytes": int(stats.alias_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
    }
    outs: tuple = ()
    if mesh_axes:
        order = list(device_ids) if device_ids else list(range(num_partitions))
        mesh = jax.sharding.Mesh(
            np.array([devices[i] for i in order]).reshape([s for _, s in mesh_axes]), tuple(n for n, _ in mesh_axes),
        )
        try:
            outs = tuple(
                _gspmd_to_named_sharding_via_mesh(GSPMDSharding(tuple(devices), s), mesh)
                for s in executable.get_output_shardings()
            )
        except Exception:  # a sharding no mesh expresses (maximal, manual): leave unknown
            outs = ()
    return CompiledProgram(executable, executable.hlo_modules()[0].to_string(), memory, live, buffers, outs, (),
                           _cost_dict(executable))


def _placements(program: CompiledProgram, specs: list | None, count: int) -> list[Any]:
    """jax shardings for an executable's HLO shardings; a one-device program is
    not partitioned and has none to read."""
    from jax._src.sharding_impls import GSPMDSharding
    from jax.sharding import SingleDeviceSharding

    devices = tuple(program.compiled.local_devices())
    if specs is None:
        return [SingleDeviceSharding(devices[0])] * count
    return [GSPMDSharding(devices, s) for s in specs]


def parameter_shardings(program: CompiledProgram, n_parameters: int) -> list[Any]:
    """Shardings to place each argument of a text-compiled executable with."""
    return _placements(program, program.compiled.get_parameter_shardings(), n_parameters)


def execute(program: CompiledProgram, args: list[Any], out_shapes: list[tuple[int, ...]]) -> list[Any]:
    """Run a text-compiled executable on placed arguments; its outputs as jax Arrays."""
    results = program.compiled.execute_sharded(args)
    shards = results.disassemble_into_single_device_arrays()
    placed = _placements(program, program.compiled.get_output_shardings(), len(out_shapes))
    return [
        jax.make_array_from_single_device_arrays(shape, sharding, parts)
        for shape, sharding, parts in zip(out_shapes, placed, shards)
    ]


def named_sharding(program: CompiledProgram, index: int) -> Any:
    """The compiled sharding of output ``index`` as a NamedSharding (see compile_stablehlo_text)."""
    return program.output_shardings[index]


def device_assignment(lowered: Any) -> list:
    """The devices a Lowered program was lowered for, in logical-id order."""
    try:
        return list(lowered._lowering._device_list)
    except (AttributeError, TypeError):
        return []


def device_identity(devices: list) -> list[list[Any]]:
    """Each device as plain JSON (id, platform, kind, host), for the analysis cache's key."""
    return [[int(d.id), str(d.platform), str(getattr(d, "device_kind", "")), int(getattr(d, "process_index", 0))]
            for d in devices]


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
    return {"devices": devices, **trees}


def deserialize_export(data: bytes) -> Any:
    """A ``jax.export`` artifact; deserialising runs no Python from it."""
    from jax import export

    return export.deserialize(bytearray(data))


def cpu_devices() -> list:
    return list(jax.devices())
