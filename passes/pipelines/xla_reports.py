"""What the analyzer reads of XLA's own reports where it gets them, beside the pipelines that analyse the
compiled program: the SPMD partitioner's warnings while it compiles (which lines to keep), and the memory
figures of a dump's buffer-assignment report (a TPU dump, ``run``'s dumped programs), a ``MemoryStats``
(the model, from ``inputs``)."""

from __future__ import annotations

from ..hlo.involuntary_remat import is_partitioner_warning
from ..hlo.memory import stats_from_buffer_assignment

# Both are hlo/'s, handed on on purpose: the analyzer may not import hlo/ (tests/test_architecture_reexports.py).
__all__ = ["is_partitioner_warning", "stats_from_buffer_assignment"]
