"""The check pipeline for compiled HLO alone (an XLA dump checked in, a fixture):
``CHECK_HLO``'s stages. Checked-in StableHLO is compiled by the analyzer and goes
through the lint pipeline (``lint.analyze_target``) as a script's target does."""

from __future__ import annotations

import re

from ..common.device_groups import MeshInfo
from ..common.shapes import array_bytes, parse_arrays, split_tuple
from ..hlo.collectives import find_collectives
from ..hlo.memory import stats_from_buffer_assignment, summarize_memory
from ..hlo.module import HloModule
from ..hlo.parser import parse_hlo_module
from ..models.entry import EntrySignature
from ..models.memory_stats import MemoryStats
from ..models.report import TargetReport, TensorInfo
from .inputs import PassConfig
from .lint import timed_collectives
from .pass_manager import Pipeline
from .rule_stage import rule_context, run_rules

# What the analyzer catches: HLO text, or XLA's memory reports beside it, that do not read.
__all__ = ["analyze_hlo_only"]

CHECK_HLO = Pipeline("check-hlo", ("hlo-parse", "entry-signature", "collectives", "step-time", "memory", "rules"),
                     reads={
                         "hlo-parse": (),
                         "entry-signature": ("hlo-parse",),  # the compiled module's parameters and results
                         "collectives": ("hlo-parse",),
                         "step-time": ("hlo-parse", "collectives"),
                         "memory": ("hlo-parse",),
                         "rules": ("hlo-parse", "entry-signature", "collectives", "step-time", "memory"),
                     })


def _hlo_tensor(index: int, path: str, shape_text: str, sharding_attr: str | None) -> TensorInfo | None:
    arrays = parse_arrays(shape_text)
    if len(arrays) != 1:
        return None
    local = arrays[0]
    tiles = [1] * len(local.dims)
    m = re.search(r"devices=\[([\d,]+)\]", sharding_attr or "")
    if m:
        counts = [int(x) for x in m.group(1).split(",")]
        if "last_tile_dim_replicate" in (sharding_attr or "") or "last_tile_dims" in (sharding_attr or ""):
            counts = counts[: len(local.dims)]
        tiles = (counts + [1] * len(local.dims))[: len(local.dims)]
    shape = [d * t for d, t in zip(local.dims, tiles)]
    return TensorInfo(
        index=index, path=path, shape=shape, dtype=local.dtype, sharding=None, donated=False,
        bytes=array_bytes(local.dtype, shape), per_device_bytes=local.nbytes,
    )


def analyze_hlo_only(
    name: str, hlo_text: str, platform: str, config: PassConfig,
    buffer_assignment_text: str | None = None, live_range_text: str | None = None, stats: MemoryStats | None = None,
) -> TargetReport:
    """The pipeline for compiled HLO alone (an XLA dump checked in as a fixture).

    Without the StableHLO the user's mesh axis names are unknown: collectives
    name their device groups (``<4 devices>``), arguments and results carry no
    sharding, and the rules that need shardings find nothing to say. Memory comes
    from the buffer-assignment report beside the HLO when there is one, or ``stats`` where the caller has
    better figures (``memory_analysis()`` of the same program).
    """
    hlo = CHECK_HLO.run("hlo-parse", parse_hlo_module, hlo_text)
    sig = CHECK_HLO.run("entry-signature", _entry_signature, hlo)
    collectives = CHECK_HLO.run("collectives", find_collectives, hlo, None, None, config.ownership,
                                 config.loop_trips).collectives
    time, collectives = CHECK_HLO.run("step-time", timed_collectives, hlo, collectives, config, None)
    memory = CHECK_HLO.run(
        "memory", summarize_memory,
        stats or stats_from_buffer_assignment(buffer_assignment_text), platform, hlo, live_range_text,
        buffer_assignment_text, config.budget_bytes, config.ownership,
    ) if buffer_assignment_text else None
    entry = hlo.entry_computation
    ctx = rule_context(
        name, platform, sig, config, inputs=sig.inputs, outputs=sig.outputs, collectives=collectives,
        memory=memory, roundtrips=(),
        entry_source=next((s for s in (hlo.source_of(i, config.ownership) for i in entry.instructions) if s), None),
    )
    return TargetReport(
        name=name, platform=platform, num_devices=hlo.num_partitions, mesh={}, memory=memory,
        collectives=list(collectives), inputs=list(sig.inputs), outputs=list(sig.outputs),
        findings=CHECK_HLO.run("rules", run_rules, ctx, config), time=time,
    )


def _entry_signature(hlo: HloModule) -> EntrySignature:
    """The entry's parameters and results as tensors, their global shapes from the HLO shardings."""
    entry = hlo.entry_computation
    # A parameter's number is its operand text: parameter(0).
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: int(i.operands[0]))
    inputs = tuple(t for t in (
        _hlo_tensor(k, i.op_name or i.name, i.shape, i.attrs.get("sharding")) for k, i in enumerate(params)
    ) if t is not None)
    root = next((i for i in entry.instructions if i.is_root), None)
    parts = split_tuple(root.shape) if root is not None else []
    outputs = tuple(t for t in (
        _hlo_tensor(k, f"result[{k}]" if len(parts) > 1 else "result", part, None) for k, part in enumerate(parts)
    ) if t is not None)
    return EntrySignature(None, MeshInfo(()), inputs, outputs, tuple((k,) for k in range(len(inputs))),
                          tuple((k,) for k in range(len(outputs))), hlo.num_partitions)
