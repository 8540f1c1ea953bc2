"""What the analyzer's FFT fix checks (analyzer/backend/fft_fixes.py) read and edit: which findings are about
the gathers of FFTs' operands, the program's FFTs run under ``shard_map`` on their batch, and the layout of
the argument that puts the gathered axes on that batch."""

from __future__ import annotations

from ..hlo.collective_origin import fft_caused
from ..hlo.collective_parameter import axis_size
from ..models.report import Finding, TensorInfo
from ..stablehlo.fft_shard_map import ffts_under_shard_map
from .catalogue import PARAMETER_FIXES


def is_fft_finding(f: Finding) -> bool:
    """A finding about the gathers of FFTs' operands (SL101's, rules/fft_gathers.py: its first why is
    collective_origin's about an FFT)."""
    return f.rule in PARAMETER_FIXES and any(fft_caused(line) for line in f.provenance[:1])


def _parts(axes: list[str], sizes: dict[str, int]) -> int:
    parts = 1
    for a in axes:
        parts *= axis_size(a, sizes)
    return parts


def ffts_on_their_batch(text: str, mesh_name: str, axes: list[str], sizes: dict[str, int]) -> tuple[str, int]:
    """(the StableHLO text with its FFTs under a manual computation over ``axes`` on their batch, how many)."""
    return ffts_under_shard_map(text, mesh_name, axes, _parts(axes, sizes))


def on_the_batch(t: TensorInfo, axes: list[str], sizes: dict[str, int]) -> list[list[str]] | None:
    """``t``'s layout with ``axes`` moved from the dimensions that hold them onto its first (the batch the FFTs
    do not transform, for the shard_map to take locally), where they divide it; None where the first holds
    them already, or none does."""
    if not t.sharding or not t.shape:
        return None
    dims = {d for d, held in enumerate(t.sharding) if any(a.split(":")[0] in axes for a in held)}
    if not dims or 0 in dims:
        return None
    spec = [[a for a in held if a.split(":")[0] not in axes] for held in t.sharding]
    spec += [[] for _ in range(len(t.shape) - len(spec))]
    if spec[0] or t.shape[0] % _parts(axes, sizes):
        return None
    spec[0] = list(axes)
    return spec
