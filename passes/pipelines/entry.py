"""The entry signature, stage 1 (``entry-signature``) of every pipeline over a StableHLO module (lint,
propagate, rewrite, suggest), and the state's round trips (``state-roundtrips``, lint's and rewrite's): one
reader each, run as a stage of the pipeline that asks (a failure names it)."""

from __future__ import annotations

from jaxlib.mlir import ir

from ..models.entry import EntrySignature, RoundTrip
from ..stablehlo.module import read_entry_signature
from ..stablehlo.state_roundtrip import correspond, mismatched
from .pass_manager import Pipeline


def entry_signature(module: ir.Module, pipeline: Pipeline) -> EntrySignature:
    """The entry function's arguments and results (shapes, shardings, paths) and its mesh, as ``pipeline``'s
    ``entry-signature`` stage (the analyzer's own use of a module before or around an analysis: a checked-in
    module's device count, the arguments a fix check moves, names the pipeline it serves)."""
    return pipeline.run("entry-signature", read_entry_signature, module)


def state_roundtrips(sig: EntrySignature, pipeline: Pipeline) -> tuple[RoundTrip, ...]:
    """Each output that returns an input's state (by pytree path, else by position), with that input, as
    ``pipeline``'s ``state-roundtrips`` stage."""
    return pipeline.run("state-roundtrips", correspond, sig)


def changed_roundtrips(roundtrips: tuple[RoundTrip, ...], pipeline: Pipeline) -> tuple[RoundTrip, ...]:
    """The round trips whose output comes back on another sharding than its input had, as ``pipeline``'s
    ``state-roundtrips`` stage."""
    return pipeline.run("state-roundtrips", mismatched, roundtrips)
