"""The exact memory of a TPU program that a script compiled (``run``).

A TPU compile's ``memory_analysis()`` counts a scratch area in its temp that no
dump file lists: the buffer assignment's preallocated temp of MaxText's small
train step (v5e-8) is 2,933,248 B where ``memory_analysis()`` says 5,301,760 B.
libtpu dumps a reproducer beside the HLO (``module_N.NAME.cl_C/module.mlir``, the
module it compiled) and the target (``target_arguments.txt``: the chip and its
grid), so the program is compiled again here, for compile-only devices of the
same topology, and its own ``memory_analysis()`` is the figure.

The second compile is trusted only when it is the same program: its buffer
assignment must give the dump's figures allocation for allocation. A script that
changed libtpu's flags (``LIBTPU_INIT_ARGS``) may compile to another program;
then the dump's figures stand, with a warning saying what they leave out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...passes.models.memory_stats import MemoryStats
from ...passes.pipelines.xla_reports import stats_from_buffer_assignment
from ..adapter import jax_adapter
from ..inputs.files import read_text_if_present as _read
from ..platforms.resolved_target import ResolvedTarget
from ..platforms.tpu_targets import TpuTarget, tpu_devices

_BOUNDS = r"{}\s*\{{\s*x:\s*(\d+)\s*y:\s*(\d+)\s*z:\s*(\d+)\s*\}}"
_CHIPS_PER_HOST = re.compile(_BOUNDS.format("chips_per_host_bounds"))
_HOSTS = re.compile(_BOUNDS.format("host_bounds"))
NOT_LISTED = ("memory from the dump alone: the TPU compiler's scratch area is not in it, so temp and peak are "
              "below what memory_analysis() says by that area")


@dataclass(frozen=True)
class DumpMemory:
    """A dumped TPU program's memory, and what it leaves out (None when it is memory_analysis()'s own)."""

    stats: MemoryStats
    warning: str | None = None


def topology_grid(target_arguments: str) -> str | None:
    """The chip grid (``2x4``, ``2x2x2``) of a dump's ``target_arguments.txt``: chips per host times hosts."""
    per_host, hosts = _CHIPS_PER_HOST.search(target_arguments), _HOSTS.search(target_arguments)
    if not per_host or not hosts:
        return None
    dims = [int(a) * int(b) for a, b in zip(per_host.groups(), hosts.groups())]
    return "x".join(map(str, dims if dims[2] > 1 else dims[:2]))



def dump_memory(hlo_path: str, target: ResolvedTarget, num_partitions: int, buffers: str) -> DumpMemory:
    """The program's memory on the resolved ``target`` (a TPU generation's, ``tpu-v5e``...): compiled again
    from its reproducer, on the generation's slice of the grid the dump names, when there is one, else (or
    when the second compile differs) the buffer assignment's figures."""
    listed = stats_from_buffer_assignment(buffers)
    reproducer = hlo_path[: -len(".after_optimizations.txt")]
    module = _read(os.path.join(reproducer, "module.mlir"))
    grid = topology_grid(_read(reproducer + ".target_arguments.txt") or "")
    if target.tpu_generation is None or module is None or grid is None:
        return DumpMemory(listed, NOT_LISTED)
    try:
        devices = tpu_devices(TpuTarget(target.tpu_generation, grid))
        program = jax_adapter.compile_stablehlo_text(module, num_partitions, devices=devices)
        again = stats_from_buffer_assignment(program.buffer_assignment_text or "")
    except Exception as e:  # libtpu missing (an input error), or a module this libtpu will not compile
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        return DumpMemory(listed, f"{NOT_LISTED}; compiling the dumped module again failed: {reason}")
    if again != listed or program.memory is None:
        return DumpMemory(listed, f"{NOT_LISTED}; compiled again without the script's flags, the module "
                                  "gave another program, so the dump's figures stand")
    return DumpMemory(MemoryStats(**program.memory))
