"""The front end of every command that runs a script: choose the devices, import the
script, parse its parameters, then call its entry (once, or once per probed value) and
keep the targets asked for. lint, snapshot, propagate, rewrite, suggest and fit all start
here; nothing else imports a user's script."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ..context.config import Settings
from ..errors import ShardLintInputError
from ..inputs.scripts import call_targets, load_entry, parse_params, select_targets
from .device_selection import check_gpu_platform
from .run_target import resolve_run_target


@dataclass(frozen=True)
class LoadedScript:
    entry: Callable[..., Any]  # shard_lint_targets, or the function the spec named
    where: str  # the file to name in messages
    params: dict[str, Any]  # --set, parsed
    settings: Settings  # resolved for the run's devices (a TPU target's count and topology, the budget)
    devices: list  # what the run compiles for (None entries: JAX's default CPU devices)
    gpu_count: int | None  # --platform gpu: the GPUs JAX sees, named when the script fails

    def call(self, wanted: Sequence[str], **overrides: Any) -> dict[str, Any]:
        """Call the entry with the parameters (``overrides`` over --set) and the devices;
        name -> jax.stages.Lowered, the targets asked for."""
        params = {**self.params, **overrides}
        try:
            return select_targets(call_targets(self.entry, self.where, params, extra={"mesh_devices": self.devices}),
                                  list(wanted), self.where)
        except ShardLintInputError as e:
            if self.gpu_count is not None and "raised" in e.problem:
                # A mesh larger than the machine fails inside the script; say what the machine has.
                raise ShardLintInputError(e.where, f"{e.problem} (JAX sees {self.gpu_count} GPUs)") from e
            if self.settings.platform not in ("cpu", "gpu") and _ran_on_compile_only_devices(e.__cause__):
                raise ShardLintInputError(e.where, f"{e.problem}: {_eager_hint(self.settings.platform)}") from e
            raise


# What JAX says when a script runs an op on compile-only devices (an eager jax.random.key(0) under
# jax.set_mesh): they compile, they cannot run.
_COMPILE_ONLY_SIGNS = ("'local_devices'", "compile-only", "compile only", "CompileOnly")


def _ran_on_compile_only_devices(error: BaseException | None) -> bool:
    return error is not None and any(sign in str(error) for sign in _COMPILE_ONLY_SIGNS)


def _eager_hint(platform: str) -> str:
    return (f"the script ran an operation eagerly (outside jax.jit) on the {platform} devices, which compile "
            "without one and cannot run anything; keep what it makes abstract (jax.eval_shape(lambda: "
            "jax.random.key(0)), a jax.ShapeDtypeStruct) or make it inside the jitted step")


@dataclass(frozen=True)
class ScriptTargets(LoadedScript):
    targets: dict[str, Any]  # name -> jax.stages.Lowered, the ones asked for


def load_script(script: str, params_text: Sequence[str], settings: Settings) -> LoadedScript:
    """Devices first (JAX is configured before the script imports it), then the script.
    --platform gpu on a machine where JAX sees none is said here, for every command."""
    settings, devices = resolve_run_target(settings)
    gpu_count = check_gpu_platform(settings)
    path_before = tuple(sys.path)
    entry, where = load_entry(script)
    if tuple(sys.path) != path_before:
        # The import changed the import path (the script's folder, and any folder the script inserts itself,
        # ``sys.path.insert(0, "../site")``): the libraries pip installed there are libraries too, so whose code a
        # frame is is decided again (a copy remakes it; the folders' listings are cached).
        settings = replace(settings)
    return LoadedScript(entry, where, parse_params(list(params_text)), settings, devices, gpu_count)


def load_script_targets(script: str, wanted: Sequence[str], params_text: Sequence[str],
                        settings: Settings) -> ScriptTargets:
    loaded = load_script(script, params_text, settings)
    shared = {f.name: getattr(loaded, f.name) for f in fields(LoadedScript)}
    return ScriptTargets(**shared, targets=loaded.call(wanted))
