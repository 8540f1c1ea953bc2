"""A target's entry function as the pipelines read it from its module (stablehlo/module.py reads it,
stablehlo/state_roundtrip.py pairs its outputs with its inputs): what the analyzer holds of a signature
between the stages it calls, imported from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common.device_groups import MeshInfo
from .report import TensorInfo


@dataclass(frozen=True)
class EntrySignature:
    """The entry function of a target: its mesh, arguments and results."""

    mesh_name: str | None
    mesh: MeshInfo
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    input_keys: tuple[tuple[Any, ...], ...]  # (argument index, then its pytree keys)
    output_keys: tuple[tuple[Any, ...], ...]
    num_partitions: int


@dataclass(frozen=True)
class RoundTrip:
    """An output of the step that is an input coming back (its state), matched by pytree path or position."""

    output: TensorInfo
    input: TensorInfo
    arg_index: int
    matched_by: str  # "path", "path suffix" (keys below the argument only) or "position"
