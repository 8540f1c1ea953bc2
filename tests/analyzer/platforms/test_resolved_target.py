"""The run's target is resolved once (platforms/resolved_target.py, made where the devices are
selected) and carried on the Settings: a GPU spec read from its file once, a TPU slice's topology chosen
once, a device's memory taken from the spec, the settings keeping it (a copy for other devices is refused), and
an executor's child handed it whole."""

import dataclasses

import pytest

from jax_shard_lint.analyzer.backend.device_selection import platform_label
from jax_shard_lint.analyzer.backend.run_target import resolve_run_target
from jax_shard_lint.analyzer.context.config import Settings
from jax_shard_lint.analyzer.platforms import gpu_targets, resolved_target
from jax_shard_lint.analyzer.platforms.performance import spec_for_platform
from jax_shard_lint.analyzer.platforms.presets import PRESETS
from jax_shard_lint.analyzer.platforms.resolved_target import resolve_spec, with_devices
from jax_shard_lint.analyzer.platforms.target_wire import target_of_text, target_text


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
        target = with_devices(spec, devices, topology, None, None)
        unselected, _ = resolve_run_target(settings, selection="none")
        assert target.label == platform_label(unselected)
        assert target.device_spec == unselected.pass_config.device_spec == spec_for_platform(platform)
        resolved = dataclasses.replace(settings, target=target)
        assert resolved.target is target and platform_label(resolved) == target.label


def test_settings_keep_their_target_and_refuse_one_for_other_devices():
    settings = Settings(platform="cpu", devices=8)
    target = with_devices(resolve_spec("cpu", 8, None, 1, None), 8, None, None, None)
    resolved = dataclasses.replace(settings, target=target)
    assert resolved.target is target
    assert dataclasses.replace(resolved, budget_bytes=1).target is target  # the budget is no part of the target
    with pytest.raises(ValueError, match="resolved for cpu x 8"):
        dataclasses.replace(resolved, devices=16)
    assert dataclasses.replace(resolved, devices=16, target=None).target is None


class _Device:
    def __init__(self, host):
        self.process_index = host


def test_the_tpu_label_names_the_hosts_of_the_devices_given_not_jaxs():
    spec = resolve_spec("tpu-v5e", 16, "4x4", 1, None)
    one = with_devices(spec, 16, "4x4", None, [_Device(0)] * 16)
    four = with_devices(spec, 16, "4x4", None, [_Device(k // 4) for k in range(16)])
    assert one.label == "tpu-v5e (compiled for 16 x TPU-V5E, topology v5e:4x4, without one)"
    assert four.slice_hosts == 4 and four.label == ("tpu-v5e (compiled for 16 x TPU-V5E, topology v5e:4x4 over 4 "
                                                    "hosts, without one)")


def test_a_target_handed_to_a_child_is_the_same_target():
    h100 = dataclasses.replace(with_devices(resolve_spec("h100", 8, None, 2, None), 8, None, None, None),
                               config_digest="abc")
    tpu = with_devices(resolve_spec("tpu-v5e", 8, None, 1, None), 8, "2x4", None, None)
    run = resolved_target.program_target("tpu-v5p", 6, None, 1, None, None)
    for target in (h100, tpu, run, with_devices(resolve_spec("cpu", 8, None, 1, None), 8, None, None, None)):
        assert target_of_text(target_text(target)) == target
    with pytest.raises(ValueError, match="not a resolved target"):
        target_of_text('{"platform": "cpu"}')


def test_a_target_config_is_read_once_and_the_bundled_memory_is_the_presets(monkeypatch, tmp_path):
    calls = []

    def counted(name, config_file=None):
        calls.append((name, config_file))
        return gpu_targets.load_target(name, config_file)

    bundled = gpu_targets.load_target("h100")
    config = tmp_path / "smaller.txtpb"
    config.write_text(bundled.spec_text.replace(f"device_memory_size: {bundled.memory_bytes}",
                                                "device_memory_size: 1000000"), encoding="utf-8")
    monkeypatch.setattr(resolved_target, "load_target", counted)
    spec = resolve_spec("h100", 8, None, 1, str(config))
    assert calls == [("h100", str(config))]
    assert spec.memory_bytes == 1000000 and spec.bundled_memory_bytes == bundled.memory_bytes


def test_runs_target_is_the_platforms_memory_and_device_model():
    # run selects no devices: its programs' target is the platform's memory and step-time model, no slice.
    tpu = resolved_target.program_target("tpu-v5p", 6, None, 1, None, None)
    assert tpu.tpu is None and tpu.memory_bytes == 95 * 1024**3
    assert tpu.device_spec == spec_for_platform("tpu-v5p")
    h100 = resolved_target.program_target("h100", 8, None, 1, None, None)
    assert h100.memory_bytes == PRESETS["h100"].memory_bytes and h100.device_spec == spec_for_platform("h100")
    cpu = resolved_target.program_target("cpu", 8, None, 1, None, None)
    assert cpu.memory_bytes is None and cpu.device_spec == spec_for_platform("cpu")
    assert Settings(devices=8).solver_device_spec == spec_for_platform("cpu")
