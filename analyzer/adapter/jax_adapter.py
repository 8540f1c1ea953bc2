"""The adapter's one front: every use of JAX's private APIs is in this package, so a JAX
upgrade touches it alone, and the rest of the tool reaches them through the names here.

- ``compiling``: compiling a Lowered program or StableHLO text, running the result, the
  releases that compile it (the MLIR context, ``get_compile_options``, ``backend_compile_and_load``,
  ``execute_sharded``, GSPMD to named shardings);
- ``lowered``: what a Lowered program says beyond its text (its devices and compile
  arguments, ``out_shardings`` as jit flattens it) and which frames JAX records in op locations;
- ``devices``: the platform chosen before JAX starts, compile-only GPU and TPU targets
  (``backends_are_initialized``);
- ``compiler_releases``: the compiler distributions, read without loading JAX.
"""

from __future__ import annotations

from .compiling import (
    CompiledProgram,
    compile_lowered,
    compile_stablehlo_text,
    compiler_versions,
    execute,
    make_ir_context,
    named_sharding,
    parameter_shardings,
    parse_stablehlo,
    program_from_record,
    program_record,
    stablehlo_module,
    stablehlo_text,
    text_without_locations,
    versions,
)
from .devices import (
    backends_initialized,
    configure_devices,
    cpu_devices,
    device_identity,
    device_kind_summary,
    gpu_devices,
    gpu_target_devices,
    tpu_target_devices,
)
from .lowered import (
    arg_info_dtype,
    call_arguments,
    deserialize_export,
    device_assignment,
    donated_argument_leaves,
    flatten_out_shardings,
    has_keyword_arguments,
    kept_argument_leaves,
    keyword_argument_names,
    lowered_identity,
    lowered_mesh,
    record_library_frames,
    sharding_axes,
)

__all__ = [
    "CompiledProgram", "arg_info_dtype", "backends_initialized", "call_arguments", "compile_lowered",
    "compile_stablehlo_text", "compiler_versions", "configure_devices", "cpu_devices", "deserialize_export",
    "device_assignment", "device_identity", "device_kind_summary", "donated_argument_leaves", "execute",
    "flatten_out_shardings", "gpu_devices", "gpu_target_devices", "has_keyword_arguments", "kept_argument_leaves",
    "keyword_argument_names",
    "lowered_identity", "lowered_mesh", "make_ir_context", "named_sharding", "parameter_shardings",
    "parse_stablehlo", "program_from_record", "program_record",
    "record_library_frames", "sharding_axes", "stablehlo_module", "stablehlo_text",
    "text_without_locations", "tpu_target_devices", "versions",
]
