"""What a report says when a target has no finding: "none", except for compiled HLO with no mesh, where
"none" would read as clean though the rules that read shardings had nothing to read."""

from __future__ import annotations

from ...passes.models.report import TargetReport

# checked_in_analysis's platform for compiled HLO text and XLA dumps.
COMPILED_HLO = "as dumped"

WITHOUT_MESH = ("none found, but most rules need the mesh, which compiled HLO does not carry: check the "
                "program's StableHLO (jax-shard-lint snapshot SCRIPT -o DIR writes it) or lint the script")


def none_found(t: TargetReport) -> str:
    return WITHOUT_MESH if not t.mesh and t.platform.startswith(COMPILED_HLO) else "none"
