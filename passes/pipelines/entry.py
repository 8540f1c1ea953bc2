"""The entry signature, stage 1 (``entry-signature``) of every pipeline over a StableHLO module (lint,
propagate, rewrite, suggest): one reader, run as a stage of the pipeline that asks (a failure names it)."""

from __future__ import annotations

from jaxlib.mlir import ir

from ..models.entry import EntrySignature
from ..stablehlo.module import read_entry_signature
from .pass_manager import Pipeline


def entry_signature(module: ir.Module, pipeline: Pipeline) -> EntrySignature:
    """The entry function's arguments and results (shapes, shardings, paths) and its mesh, as ``pipeline``'s
    ``entry-signature`` stage (the analyzer's own use of a module before or around an analysis: a checked-in
    module's device count, the arguments a fix check moves, names the pipeline it serves)."""
    return pipeline.run("entry-signature", read_entry_signature, module)
