"""The run's target is resolved once (platforms/resolved_target.py, made where the devices are
selected) and carried on the Settings: a GPU spec read from its file once, a TPU slice's topology chosen
once, a device's memory taken from the spec, and a copy of the settings for other devices holding none."""

import dataclasses

from jax_shard_lint.analyzer.backend.device_selection import platform_label, without_device_selection
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.analyzer.platforms import gpu_targets, resolved_target
from jax_shard_lint.analyzer.platforms.performance import spec_for_platform
from jax_shard_lint.analyzer.platforms.presets import PRESETS
from jax_shard_lint.analyzer.platforms.resolved_target import resolve_spec, with_devices


def test_a_gpu_spec_is_read_once(monkeypatch):
    calls = []

    def counted(name, config_file=None):
        calls.append(name)
        return gpu_targets.load_target(name, config_file)

    monkeypatch.setattr(resolved_target, "load_target", counted)
    spec = resolve_spec("h100", 8, None, 2, None)
    assert calls == ["h100"]
    with open(gpu_targets.__file__.replace("gpu_targets.py", "../data/gpu_targets/h100.txtpb"), encoding="utf-8") as f:
        memory = int(next(line for line in f if "device_memory_size" in line).split(":")[1])
    assert spec.memory_bytes == spec.bundled_memory_bytes == memory == PRESETS["h100"].memory_bytes


def test_a_tpu_slice_is_chosen_once_and_its_memory_is_the_chips():
    spec = resolve_spec("tpu-v5e", 8, None, 1, None)
    assert spec.tpu is not None and spec.tpu.topology == "2x4" and spec.tpu.num_devices == 8
    assert spec.memory_bytes == 16 * 1024**3  # v5e: 16 GiB of HBM per chip, one device per chip


def test_the_label_is_the_one_reports_gave_before():
    """The resolved label and the one made for settings whose devices the tool does not select (a library
    caller's) are the same text; so is the step time's device model, the platform's."""
    for platform, devices, topology, hosts in (("cpu", 8, None, 1), ("h100", 8, None, 2), ("tpu-v5e", 8, "2x4", 1)):
        settings = Settings(platform=platform, devices=devices, topology=topology, hosts=hosts)
        spec = resolve_spec(platform, devices, topology, hosts, None)
        target = with_devices(spec, devices, topology, None)
        unselected = without_device_selection(settings)
        assert target.label == platform_label(unselected)
        assert target.device_spec == unselected.device_spec() == spec_for_platform(platform)
        resolved = dataclasses.replace(settings, target=target)
        assert resolved.target is target and platform_label(resolved) == target.label


def test_settings_for_other_devices_hold_no_stale_target():
    settings = Settings(platform="cpu", devices=8)
    target = with_devices(resolve_spec("cpu", 8, None, 1, None), 8, None, None)
    resolved = dataclasses.replace(settings, target=target)
    assert resolved.target is target
    assert dataclasses.replace(resolved, devices=16).target is None
    assert dataclasses.replace(resolved, budget_bytes=1).target is target  # the budget is no part of the target
