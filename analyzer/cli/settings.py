"""Settings from the command line: the arguments over the config file over the defaults, checked once."""

from __future__ import annotations

import argparse
import os

from ..errors import ShardLintInputError


def settings_from_args(args: argparse.Namespace):
    from ..context.config import (
        Settings,
        device_budget,
        file_settings,
        find_pyproject,
        parse_budget,
        parse_option,
        rule_codes,
    )

    script_path = args.script.split(":")[0] if getattr(args, "script", None) else "."
    config_path = args.config or find_pyproject(script_path if os.path.exists(script_path) else os.getcwd())
    if args.config and not os.path.isfile(args.config):
        raise ShardLintInputError(args.config, "no such file")
    fields = file_settings(config_path) if config_path else {}
    if os.path.isfile(script_path):
        # The script's folder is the user's code (helper modules beside it included).
        fields["user_roots"] = (os.path.dirname(os.path.abspath(script_path)),)
    if getattr(args, "devices", None) is not None:
        from ..inputs.limits import MAX_DEVICES

        if args.devices < 1:
            raise ShardLintInputError("--devices", "must be at least 1")
        if args.devices > MAX_DEVICES:
            raise ShardLintInputError("--devices", f"at most {MAX_DEVICES} virtual devices, got {args.devices}")
        fields["devices"] = args.devices
    if getattr(args, "platform", None):
        fields["platform"] = args.platform
    if getattr(args, "target_config", None):
        fields["target_config"] = args.target_config
    if getattr(args, "hosts", None) is not None:
        if args.hosts < 1:
            raise ShardLintInputError("--hosts", "must be at least 1")
        fields["hosts"] = args.hosts
    from ..platforms.gpu_targets import GPU_TARGETS, TPU_TARGETS

    if fields.get("hosts", Settings.hosts) > 1 and fields.get("platform", Settings.platform) not in GPU_TARGETS:
        raise ShardLintInputError("--hosts", f"needs a GPU target platform ({', '.join(GPU_TARGETS)}); a TPU "
                                  "target's hosts come from its --topology")
    if getattr(args, "topology", None):
        fields["topology"] = args.topology
    if getattr(args, "resolved_target", None):  # an executor's child: the asking run's target, whole
        fields.update(_given_target(args.resolved_target))
    if fields.get("topology") and fields.get("platform", Settings.platform) not in TPU_TARGETS:
        raise ShardLintInputError("--topology", f"needs a TPU target platform ({', '.join(TPU_TARGETS)})")
    if args.budget is not None:
        fields["budget_bytes"], fields["budget_source"] = parse_budget(args.budget, "--budget"), "--budget"
    if args.device is not None:
        fields["budget_bytes"], fields["budget_source"] = device_budget(args.device, "--device"), args.device
    options = dict(fields.get("options", {}))
    for item in args.threshold:
        name, sep, value = item.partition("=")
        if not sep:
            raise ShardLintInputError("--threshold", f"expected NAME=VALUE, got {item!r}")
        options[name.strip()] = parse_option(name.strip(), value.strip(), "--threshold")
    fields["options"] = options
    fields["ignore"] = fields.get("ignore", frozenset()) | rule_codes(args.ignore, "--ignore")
    if getattr(args, "loop_trips", None) is not None:
        if args.loop_trips < 1:
            raise ShardLintInputError("--loop-trips", f"must be at least 1, got {args.loop_trips}")
        fields["loop_trips"] = args.loop_trips
    if getattr(args, "fail_on", None):
        fields["fail_on"] = args.fail_on
    fields["cache_dir"] = _cache_dir(args)
    fields["check_fixes"] = (hasattr(args, "no_fix_check") and not args.no_fix_check
                             and os.environ.get("JAX_SHARD_LINT_NO_FIX_CHECK") != "1")
    # Without --budget or --device the budget is the target's own memory: given when the target is
    # resolved, with the run's devices (backend/device_selection.py), never derived here before it.
    return Settings(**fields)


def _cache_dir(args: argparse.Namespace) -> str | None:
    """The analysis cache's folder for a command that takes ``--cache-dir``/``--no-cache``; None: no cache."""
    from ..cache.analysis_cache import default_cache_folder

    if not hasattr(args, "no_cache") or args.no_cache:
        return None
    if args.cache_dir is not None:  # named on the command line: over the environment
        if os.path.exists(args.cache_dir) and not os.path.isdir(args.cache_dir):
            raise ShardLintInputError("--cache-dir", f"{args.cache_dir} is a file, not a folder")
        return args.cache_dir
    return None if os.environ.get("JAX_SHARD_LINT_NO_CACHE") == "1" else default_cache_folder()


def _given_target(text: str) -> dict:
    """The fields of a target the asking run resolved (executors/): the settings are that target's."""
    from ..platforms.target_wire import target_of_text

    try:
        target = target_of_text(text)
    except ValueError as e:
        raise ShardLintInputError("--resolved-target", str(e)) from None
    return {"platform": target.platform, "devices": target.num_devices, "topology": target.topology,
            "hosts": target.hosts, "target_config": target.target_config, "target": target}
