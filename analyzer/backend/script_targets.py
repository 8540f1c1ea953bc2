"""What every command that runs a script does first: choose the devices, import the
script, call its entry with the parameters and the devices, keep the targets asked for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..context.config import Settings
from ..inputs.scripts import call_targets, load_entry, parse_params, select_targets
from .device_selection import select_run_devices


@dataclass(frozen=True)
class ScriptTargets:
    entry: Callable[..., Any]  # shard_lint_targets, or the function the spec named
    where: str  # the file to name in messages
    params: dict[str, Any]  # --set, parsed
    devices: list  # what the run compiles for (None entries: JAX's default CPU devices)
    targets: dict[str, Any]  # name -> jax.stages.Lowered, the ones asked for


def load_script_targets(script: str, wanted: Sequence[str], params_text: Sequence[str],
                        settings: Settings) -> ScriptTargets:
    """snapshot, propagate, rewrite and suggest start here. (lint checks for GPUs before the
    import and names them when the script fails; fit calls the entry once per value.)"""
    devices = select_run_devices(settings)
    entry, where = load_entry(script)
    params = parse_params(list(params_text))
    targets = select_targets(call_targets(entry, where, params, extra={"mesh_devices": devices}), list(wanted), where)
    return ScriptTargets(entry, where, params, devices, targets)
