"""Whether an argument's sharding takes part in a finding's collectives, measured by compiling: the
program with that argument replicated, its collectives at the finding's line compared with the program as
written (finding_provenance.ConflictCheck). A collective's why chain that begins at another argument than
the one the finding names is printed, as the other side of the conflict, only where this says so (the tokens'
batch sharding meeting a weight's sharding on the main example; never a kernel on another line's axes)."""

from __future__ import annotations

from collections import Counter

from ...passes.models.report import Collective, Finding, TargetReport
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.lint import LINT, ConflictCheck
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from . import compile_memo
from .candidate_compile import compiled_candidate
from .sharding_edits import with_entry_shardings


def _key(c: Collective) -> tuple[object, ...]:
    """A collective as two compiles of one program can be compared: its names are XLA's numbering."""
    return c.kind, tuple(c.mesh_axes), c.bytes, c.count, c.source.line if c.source is not None else None


def conflict_check(text: str, settings: Settings, where: str, devices: list) -> ConflictCheck:
    """The check for one target's StableHLO ``text``: each argument replicated is compiled once (a figures-
    only compile through the analysis cache, as a fix candidate is)."""
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, LINT)
    replicated: dict[str, TargetReport | None] = {}

    def variant(report: TargetReport, path: str) -> TargetReport | None:
        if path not in replicated:
            given = next(t for t in report.inputs if t.path == path)
            edited = with_entry_shardings(module, {}, sig.mesh_name or "mesh", {given.index: [[] for _ in given.shape]})
            try:
                with (compile_memo.stage_logged("conflict-check"),
                      compile_memo.described(candidate=f"{path} replicated")):
                    replicated[path] = compiled_candidate(report.name, edited, sig, settings, where, devices)
            except ShardLintInputError:  # XLA refuses it (out of memory): nothing measured, nothing shown
                replicated[path] = None
        return replicated[path]

    def takes_part(report: TargetReport, f: Finding, path: str) -> bool:
        given = next((t for t in report.inputs if t.path == path), None)
        if given is None or not any(given.sharding or []) or not sig.mesh_name:
            return False
        names = set(f.ops or [f.subject or ""])
        written = Counter(_key(c) for c in report.collectives if c.hlo_name in names)
        after = variant(report, path)
        if not written or after is None:
            return False
        compiled = Counter(_key(c) for c in after.collectives)
        return any(compiled[k] < n for k, n in written.items())

    return takes_part
