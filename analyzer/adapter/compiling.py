"""Compiling a program and running the result: a ``jax.stages.Lowered`` compiled with
XLA's reports read back, StableHLO text compiled without re-tracing Python, and
the releases that compile it.

Private pieces used:
- the MLIR context JAX builds for its own modules (``jax._src.interpreters.mlir.make_ir_context``);
- compiling StableHLO text (``jax._src.compiler.get_compile_options`` and ``backend_compile_and_load``)
  and running the result (``execute_sharded``);
- turning XLA's OpShardings back into NamedShardings (``jax._src.sharding_impls.GSPMDSharding``,
  ``_gspmd_to_named_sharding_via_mesh``).
Everything else here is public API, kept beside them because it names XLA's
file layout (dump file names), which also changes between versions.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...passes.pipelines.xla_reports import is_partitioner_warning
from .compiler_releases import COMPILER_PLUGINS, installed_releases
from .native_stderr import capture_native_stderr, compiled_with_warnings, quiet_native_stderr

with quiet_native_stderr():
    import jax
    import jaxlib
    from jaxlib.mlir import ir


def versions() -> tuple[str, str]:
    return jax.__version__, jaxlib.__version__


def compiler_versions() -> dict[str, str]:
    """The releases that compile a program here: jax, jaxlib (as loaded), and each installed XLA plugin."""
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, **installed_releases(COMPILER_PLUGINS)}


def make_ir_context() -> ir.Context:
    """An MLIR context with every dialect JAX emits (stablehlo, sdy, chlo, func, ...)."""
    from jax._src.interpreters import mlir as jax_mlir

    return jax_mlir.make_ir_context()


def parse_stablehlo(text: str, context: ir.Context | None = None) -> ir.Module:
    """Parse StableHLO text; the module keeps its context alive."""
    ctx = context or make_ir_context()
    with ctx:
        return ir.Module.parse(text)


def text_without_locations(text: str) -> str:
    """StableHLO text printed again without its source locations: the program XLA compiles, whatever
    Python stack (or snapshot file) it was lowered from."""
    module = parse_stablehlo(text)
    return str(module.operation.get_asm(enable_debug_info=False))


def stablehlo_text(lowered: Any) -> str:
    """The lowered module with shardings and source locations."""
    return lowered.as_text(debug_info=True)


def stablehlo_module(lowered: Any) -> ir.Module:
    """The lowered module itself (no print and re-parse). Passes only read it;
    anything that rewrites works on a clone."""
    return lowered.compiler_ir("stablehlo")


@dataclass(frozen=True)
class CompiledProgram:
    compiled: Any  # XLA's executable; None for a program read back from the compile memo (program_from_record)
    hlo_text: str
    memory: dict[str, int] | None
    live_range_text: str | None
    buffer_assignment_text: str | None
    output_shardings: tuple[Any, ...]  # flattened jax.sharding.Sharding leaves
    input_shardings: tuple[Any, ...]
    cost: dict[str, Any] | None = None  # XLA's cost_analysis(), where the backend gives one
    # What XLA's SPMD partitioner warned while compiling ("Involuntary full rematerialization").
    compiler_warnings: str = ""


# LLVM's level for a CPU program that is analysed and never run: XLA's HLO passes, SPMD partitioning and
# buffer assignment (every figure the analysis reads) come before LLVM and do not read it; -O0 roughly
# halves the compile's CPU time (3.3 s -> 1.8 s for examples/fsdp_tp_train_step.py).
UNOPTIMIZED_MACHINE_CODE = ("xla_backend_optimization_level", 0)


@dataclass(frozen=True)
class RecordedSharding:
    """A compiled sharding read back from the compile memo: its PartitionSpec's entries (what
    ``sharding_axes`` reads), no mesh. ``UNFIXED`` stands for an entry no mesh axes name (UNCONSTRAINED)."""
    spec: tuple[Any, ...]


UNFIXED = "<unfixed>"


def _spec_entries(sharding: Any) -> list[Any] | None:
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return None
    return [e if e is None or isinstance(e, str) else list(e) if isinstance(e, tuple) else {UNFIXED: repr(e)}
            for e in tuple(spec)]


def _recorded(entries: list[Any] | None) -> RecordedSharding | None:
    if entries is None:
        return None
    return RecordedSharding(tuple(tuple(e) if isinstance(e, list) else object() if isinstance(e, dict) else e
                                  for e in entries))


def program_record(program: CompiledProgram) -> dict[str, Any]:
    """Everything the tool reads from one compile, as plain JSON (the compile memo's entry): the compiled
    HLO text, memory_analysis()'s figures, XLA's dumped reports, the compiled shardings' PartitionSpecs,
    cost_analysis() (as JSON text: its floats, inf and nan included, come back exactly) and the warnings."""
    import json

    return {
        "hlo_text": program.hlo_text, "memory": program.memory, "live_range_text": program.live_range_text,
        "buffer_assignment_text": program.buffer_assignment_text,
        "output_shardings": [_spec_entries(s) for s in program.output_shardings],
        "input_shardings": [_spec_entries(s) for s in program.input_shardings],
        "cost_json": None if program.cost is None else json.dumps(program.cost),
        "compiler_warnings": program.compiler_warnings,
    }


def program_from_record(record: dict[str, Any]) -> CompiledProgram:
    """A CompiledProgram from ``program_record``'s JSON: the same figures and texts, no executable."""
    import json

    return CompiledProgram(
        None, record["hlo_text"], record["memory"], record["live_range_text"], record["buffer_assignment_text"],
        tuple(_recorded(e) for e in record["output_shardings"]), tuple(_recorded(e) for e in record["input_shardings"]),
        None if record["cost_json"] is None else json.loads(record["cost_json"]), record["compiler_warnings"])


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


def compile_lowered(lowered: Any, with_reports: bool = True, optimize_machine_code: bool = True) -> CompiledProgram:
    """Compile a ``jax.stages.Lowered``; with reports, XLA also writes its
    buffer-assignment and live-range reports, which are read back here. Without
    ``optimize_machine_code`` a CPU target's LLVM runs at -O0 (the same figures: see
    compile_stablehlo_text); for an analysis whose executable never runs.

    ``configure_devices`` turns the persistent compilation cache off: a cache hit
    writes no dumps.
    """
    from .lowered import device_assignment

    options: dict[str, Any] = {}
    devices = device_assignment(lowered)
    if not optimize_machine_code and devices and devices[0].platform == "cpu":
        options[UNOPTIMIZED_MACHINE_CODE[0]] = UNOPTIMIZED_MACHINE_CODE[1]
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


def _name_for_xla(module: ir.Module) -> None:
    """XLA's import wants a named module whose entry is ``@main``: a module written
    by hand (or by another tool) may have neither, which is no reason to refuse it."""
    from ...passes.pipelines.stablehlo_edits import entry_to_rename

    attrs = module.operation.attributes
    with module.context:
        if "sym_name" not in attrs:
            attrs["sym_name"] = ir.StringAttr.get("module")
        entry = entry_to_rename(module)
        if entry is not None:
            old = ir.StringAttr(entry.operation.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(old, "main", module.operation)
            entry.operation.attributes["sym_name"] = ir.StringAttr.get("main")


# What a CPU compile run again only for the partitioner's warnings sets (compiled_with_warnings): the SPMD
# partitioner runs before fusion and code generation, so XLA's older CPU fusion (this jaxlib's, where it still
# has the option) and -O0 give the same warnings for about a quarter of the CPU
# (tests/analyzer/adapter/test_warnings_only_compile.py compares them).
WARNINGS_ONLY = (("xla_cpu_use_fusion_emitters", False), UNOPTIMIZED_MACHINE_CODE)


def _warnings_only_compile(compile_program: Callable[[], Any], module: ir.Module, devices: list,
                           num_partitions: int) -> Callable[[], object] | None:
    """A compile of ``module`` for its partitioner's warnings alone (``WARNINGS_ONLY``) on a CPU; None on
    another platform. Where this jaxlib lacks the options, it is ``compile_program`` again."""
    if devices[0].platform != "cpu":
        return None

    def compile_for_warnings() -> object:
        import numpy as np
        from jax._src import compiler
        from jax._src.lib import xla_client as xc

        if _WARNINGS_ONLY_REFUSED:
            return compile_program()
        options = compiler.get_compile_options(
            num_replicas=1, num_partitions=num_partitions,
            device_assignment=np.array(devices).reshape(1, num_partitions),
            env_options_overrides=dict[str, Any](WARNINGS_ONLY))
        options.executable_build_options.use_spmd_partitioning = True
        try:
            return compiler.backend_compile_and_load(devices[0].client, module, xc.DeviceList(tuple(devices)),
                                                     options, [])
        except Exception as e:  # jax 0.12's CPU compiler has no xla_cpu_use_fusion_emitters: as it was compiled
            if "No such compile option" in str(e):
                _WARNINGS_ONLY_REFUSED.append(str(e))
            return compile_program()

    return compile_for_warnings


# Set once this jaxlib's CPU compiler refuses ``WARNINGS_ONLY``'s options (jax 0.12's: its compiles run on the
# thread that asks, so their warnings are told apart by thread and seldom compiled again).
_WARNINGS_ONLY_REFUSED: list[str] = []


def compile_stablehlo_text(
    text: str, num_partitions: int, mesh_axes: tuple[tuple[str, int], ...] = (),
    device_ids: tuple[int, ...] | None = None, with_reports: bool = True, devices: list | None = None,
    optimize_machine_code: bool = True,
) -> CompiledProgram:
    """Compile StableHLO text (with Shardy shardings) for ``devices`` (default: the
    first ``num_partitions`` of the default backend), without re-tracing Python.
    Compile-only devices of a GPU target give an executable that cannot run.

    Output shardings come back as NamedShardings over a mesh with ``mesh_axes``
    (device order ``device_ids``, the sdy.mesh's), so they read like the user's.

    Without ``optimize_machine_code`` a CPU target's LLVM runs at -O0: XLA's HLO passes, its SPMD
    partitioning and its buffer assignment (the collectives and the memory figures) run before LLVM and
    do not read its level, so the figures are the same (tests/analyzer/adapter/test_unoptimized_codegen.py
    compares them) and the compile costs about half the CPU; the executable is only slower to run.
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
        overrides: dict[str, Any] = {"xla_dump_to": dump_dir} if with_reports else {}
        if not optimize_machine_code and devices[0].platform == "cpu":
            overrides[UNOPTIMIZED_MACHINE_CODE[0]] = UNOPTIMIZED_MACHINE_CODE[1]
        options = compiler.get_compile_options(
            num_replicas=1, num_partitions=num_partitions,
            device_assignment=np.array(devices).reshape(1, num_partitions), env_options_overrides=overrides or None,
        )
        options.executable_build_options.use_spmd_partitioning = True
        module = parse_stablehlo(text)
        _name_for_xla(module)
        # The partitioner's warnings, a fix candidate's too: a candidate XLA rematerializes is not better.
        def compile_program() -> Any:
            return compiler.backend_compile_and_load(backend, module, xc.DeviceList(tuple(devices)), options, [])

        executable, warnings = compiled_with_warnings(
            compile_program, is_partitioner_warning,
            _warnings_only_compile(compile_program, module, devices, num_partitions))
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
                           _cost_dict(executable), warnings)


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
