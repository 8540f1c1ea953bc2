"""Settings from ``[tool.jax-shard-lint]`` in pyproject.toml and the command line.

The command line wins over the file. Example::

    [tool.jax-shard-lint]
    devices = 8
    device = "h100"            # or budget = "80GiB"
    fail-on = "warning"
    ignore = ["SL203"]
    first-party = ["mypkg", "src/"]   # whose frames are the user's (default: the script's folder)
    third-party = ["vendored/"]       # files that are never the user's

    [tool.jax-shard-lint.thresholds]
    replicating-collective-bytes = "128MiB"
    headroom-fraction = 0.15

    [tool.jax-shard-lint.severity]
    SL201 = "error"
"""

from __future__ import annotations

import functools
import os
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ...passes.common.byte_sizes import parse_bytes
from ...passes.models.device_spec import DeviceSpec
from ...passes.models.report import Severity
from ...passes.pipelines.catalogue import RULES, OptionKind, all_options
from ...passes.pipelines.inputs import DEFAULT_OWNERSHIP, CodeOwnership, PassConfig
from ..errors import ShardLintInputError
from ..inputs.files import folders_beside, installed_folders, tool_folders
from ..platforms.performance import cpu_device_spec
from ..platforms.presets import PRESETS, find_preset
from ..platforms.resolved_target import ResolvedTarget

FAIL_ON = ("error", "warning", "never")
_KNOWN_KEYS = {"devices", "device", "budget", "fail-on", "ignore", "thresholds", "severity", "platform", "hosts",
               "target-config", "first-party", "third-party", "topology"}


@dataclass(frozen=True)
class Settings:
    """One run's settings, resolved once (defaults, then the config file, then the command
    line) and never changed after: a command that needs other values (more devices for a
    module, the TPU topology it resolved) makes a new one with ``dataclasses.replace``.

    What the passes and the solver are told (``pass_config``, ``solver_device_spec``) is made with the
    settings, from their fields, and read below as values: nothing under backend/ or commands/ calls back
    into this module to derive them (a copy made with ``dataclasses.replace`` makes its own)."""

    devices: int = 8
    platform: str = "cpu"
    budget_bytes: int | None = None
    budget_source: str | None = None
    fail_on: str = "error"
    ignore: frozenset[str] = frozenset()
    options: dict[str, Any] = field(default_factory=dict)
    severities: dict[str, Severity] = field(default_factory=dict)
    config_file: str | None = None
    target_config: str | None = None
    hosts: int = 1
    topology: str | None = None
    first_party: tuple[str, ...] = ()
    third_party: tuple[str, ...] = ()
    # Folders whose files are the user's (the script's): set by the command line.
    user_roots: tuple[str, ...] = ()
    # Where finished target reports are kept (analyzer/cache); None: no cache (--no-cache).
    cache_dir: str | None = None
    # Compile each finding's fix before it is shown (lint; backend/fix_checks.py).
    check_fixes: bool = False
    # --loop-trips: runs of each loop whose trip count XLA does not know (PassConfig.loop_trips); None: once.
    loop_trips: int | None = None
    # The target the run compiles for, resolved once when the command starts (backend/run_target.py)
    # and kept by every copy; None before that.
    target: ResolvedTarget | None = None
    # Made from the fields above when the settings are (never given): what the passes are told (options,
    # severities, the budget, whose code a frame is, the target's device model), read by every target,
    # checked-in module and fix check; whose frames are the user's is its ``ownership``.
    pass_config: PassConfig = field(init=False, repr=False, compare=False)
    # The device model suggest's solver prices with (and lint's solver fixes): the resolved target's, or
    # the CPU's where it has none (a GPU the table does not know, settings whose target was never
    # resolved), so the solver always has one.
    solver_device_spec: DeviceSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A copy for other devices, platform or topology is made before the target is resolved, or
        # names target=None: a target never describes settings it was not resolved for.
        if self.target is not None and not self.target.describes(
                self.platform, self.devices, self.topology, self.hosts, self.target_config):
            raise ValueError(f"settings for {self.platform} x {self.devices} given a target resolved for "
                             f"{self.target.platform} x {self.target.num_devices}")
        # The step-time estimate's device model: the resolved target's (None for GPUs it does not know,
        # and for settings whose target was never resolved).
        device_spec = self.target.device_spec if self.target is not None else None
        object.__setattr__(self, "pass_config", PassConfig(
            options=dict(self.options), severities=dict(self.severities),
            disabled=self.ignore, budget_bytes=self.budget_bytes, ownership=_ownership_of(self),
            device_spec=device_spec, where=_display_where, loop_trips=self.loop_trips,
        ))
        object.__setattr__(self, "solver_device_spec", device_spec or cpu_device_spec())


def _ownership_of(settings: Settings) -> CodeOwnership:
    """Whose frames are the user's; one object per configuration, so its caches of decided files and
    attributed locations are shared by every pass."""
    root = os.path.dirname(settings.config_file) if settings.config_file else os.getcwd()
    return _ownership(settings.first_party, settings.third_party, root, settings.user_roots,
                      library_folders(settings))


def library_folders(settings: Settings) -> tuple[str, ...]:
    """The package folders of libraries pip installed into a folder on the import path as it is now (the
    script's own ``sys.path.insert`` included, once it has run), or beside the script: a library, not the
    user's, unless first-party. A report's sources depend on them, so its cache key holds them, and a
    snapshot records them for ``check``, which runs no script."""
    mine = {p.strip().split(".")[0] for p in settings.first_party}
    return tuple(f for f in installed_folders(tuple(sys.path) + folders_beside(tuple(settings.user_roots)))
                 if os.path.basename(f) not in mine)


@functools.lru_cache(maxsize=16)
def _ownership(first_party: tuple[str, ...], third_party: tuple[str, ...], root: str,
               user_roots: tuple[str, ...], installed: tuple[str, ...] = ()) -> CodeOwnership:
    return CodeOwnership(first_party=first_party, third_party=tool_folders() + installed + third_party, root=root,
                         user_roots=user_roots, stdlib=DEFAULT_OWNERSHIP.stdlib)


def find_pyproject(start: str) -> str | None:
    folder = os.path.abspath(start if os.path.isdir(start) else os.path.dirname(start) or ".")
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def parse_option(name: str, value: Any, where: str) -> Any:
    options = all_options()
    if name not in options:
        raise ShardLintInputError(where, f"unknown threshold {name!r} (known: {', '.join(sorted(options))})")
    kind = options[name].kind
    try:
        if kind is OptionKind.bytes:
            return parse_bytes(value)
        if kind is OptionKind.fraction:
            v = float(value)
            if not 0 <= v <= 1:
                raise ValueError(f"{value} is not between 0 and 1")
            return v
        if kind is OptionKind.ratio:
            v = float(value)
            if not v >= 1:
                raise ValueError(f"{value} is not a multiple of at least 1")
            return v
        return int(value)
    except ValueError as e:
        raise ShardLintInputError(where, f"threshold {name}: {e}") from None


def parse_budget(text: str, where: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise ShardLintInputError(where, f"unparsable budget: {e}") from None


def device_budget(name: str, where: str) -> int:
    preset = find_preset(name)
    if preset is None:
        raise ShardLintInputError(where, f"unknown device {name!r} (known: {', '.join(PRESETS)})")
    return preset.memory_bytes


def rule_codes(values: Any, where: str) -> set[str]:
    if not isinstance(values, list):
        raise ShardLintInputError(where, "ignore must be a list of rule codes")
    out = set()
    from ...passes.pipelines.catalogue import find_rule

    for v in values:
        rule = find_rule(str(v))
        if rule is None:  # a code (SL201, sl201) or a name (missing-donation), as `rule` takes them
            raise ShardLintInputError(where, f"unknown rule {v!r} in ignore")
        out.add(rule.code)
    return out


def file_settings(path: str) -> dict[str, Any]:
    """The Settings fields ``[tool.jax-shard-lint]`` in ``path`` gives (none when it has no such table)."""
    from ..inputs.files import read_input_text

    try:
        data = tomllib.loads(read_input_text(path, strict=True))
    except tomllib.TOMLDecodeError as e:
        raise ShardLintInputError(path, f"invalid TOML: {e}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ShardLintInputError(f"{path} [tool]", f"expected a table, got {tool!r}")
    section = tool.get("jax-shard-lint")
    if section is None:
        return {}
    fields: dict[str, Any] = {"config_file": path}
    where = f"{path} [tool.jax-shard-lint]"
    if not isinstance(section, dict):
        raise ShardLintInputError(where, f"expected a table, got {section!r}")
    for key in ("thresholds", "severity"):
        if key in section and not isinstance(section[key], dict):
            raise ShardLintInputError(where, f"{key}: expected a table, got {section[key]!r}")
    unknown = set(section) - _KNOWN_KEYS
    if unknown:
        raise ShardLintInputError(where, f"unknown key {sorted(unknown)[0]!r}")
    if "devices" in section:
        if not isinstance(section["devices"], int) or not 1 <= section["devices"] <= 4096:
            raise ShardLintInputError(where, "devices must be an integer from 1 to 4096")
        fields["devices"] = section["devices"]
    if "platform" in section:
        from ..platforms.gpu_targets import PLATFORMS

        if section["platform"] not in PLATFORMS:
            raise ShardLintInputError(where, f"platform must be one of {', '.join(PLATFORMS)}")
        fields["platform"] = str(section["platform"])
    if "hosts" in section:
        if not isinstance(section["hosts"], int) or section["hosts"] < 1:
            raise ShardLintInputError(where, "hosts must be a positive integer")
        fields["hosts"] = section["hosts"]
    if "topology" in section:
        fields["topology"] = str(section["topology"])
    if "target-config" in section:
        fields["target_config"] = os.path.join(os.path.dirname(path), str(section["target-config"]))
    if "budget" in section:
        fields["budget_bytes"], fields["budget_source"] = parse_budget(str(section["budget"]), where), "config"
    if "device" in section:
        fields["budget_bytes"] = device_budget(str(section["device"]), where)
        fields["budget_source"] = str(section["device"])
    if "fail-on" in section:
        if section["fail-on"] not in FAIL_ON:
            raise ShardLintInputError(where, f"fail-on must be one of {', '.join(FAIL_ON)}")
        fields["fail_on"] = section["fail-on"]
    if "ignore" in section:
        fields["ignore"] = frozenset(rule_codes(section["ignore"], where))
    for key in ("first-party", "third-party"):
        if key in section:
            value = section[key]
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ShardLintInputError(where, f"{key} must be a list of module names or paths")
            fields[key.replace("-", "_")] = tuple(value)
    fields["options"] = {name: parse_option(name, value, where)
                           for name, value in (section.get("thresholds") or {}).items()}
    severities: dict[str, Severity] = {}
    for code, sev in (section.get("severity") or {}).items():
        if code.upper() not in RULES:
            raise ShardLintInputError(where, f"unknown rule {code!r} in severity")
        try:
            severities[code.upper()] = Severity(sev)
        except ValueError:
            raise ShardLintInputError(where, f"severity of {code} must be error, warning or info") from None
    fields["severities"] = severities
    return fields


def _display_where(source, via) -> str:
    """``examples/vfi.py:34 via flax/...``: a location in a message, as the reports show it."""
    from ...passes.models.report import where_text
    from .display_paths import display_source

    return where_text(display_source(source) if source else None, display_source(via) if via else None)
