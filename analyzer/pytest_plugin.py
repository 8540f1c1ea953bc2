"""A pytest plugin (registered through the ``pytest11`` entry point): the
``shard_lint`` fixture gives tests the assertions of
:mod:`jax_shard_lint.analyzer.testing`, and ``--shard-lint-devices N`` (or
``shard_lint_devices = 8`` under ``[tool.pytest.ini_options]``) gives the
tests N virtual CPU devices, so a mesh has something to shard over."""

from __future__ import annotations

import types

import pytest

DEVICES_OPTION = "shard_lint_devices"


def pytest_addoption(parser: pytest.Parser) -> None:
    help_text = ("virtual CPU devices for JAX (jax_num_cpu_devices), set before any test imports JAX, so meshes "
                 "in tests have devices to shard over (jax-shard-lint)")
    parser.addoption("--shard-lint-devices", type=int, default=None, dest=DEVICES_OPTION, help=help_text)
    parser.addini(DEVICES_OPTION, help_text, default=None)


def pytest_configure(config: pytest.Config) -> None:
    # JAX is imported only when asked for: the plugin is loaded in every pytest run of the environment.
    wanted = config.getoption(DEVICES_OPTION) or config.getini(DEVICES_OPTION)
    if not wanted:
        return
    try:
        count = int(wanted)
    except ValueError:
        raise pytest.UsageError(f"shard_lint_devices: expected a number of devices, got {wanted!r}") from None
    from .testing import use_virtual_devices

    use_virtual_devices(count)


@pytest.fixture
def shard_lint():
    """jax-shard-lint's assertions on a ``jax.stages.Lowered``, compiled as it is:

    - ``shard_lint.assert_no_collectives(lowered, kinds=..., min_bytes=..., axes=...)``: no collective of
      those kinds (over those mesh axes) moving at least ``min_bytes`` per step;
    - ``shard_lint.assert_peak_below(lowered, "40GiB")``: the per-device peak is below the budget;
    - ``shard_lint.analyze(lowered)``: the whole report (collectives, memory, findings).

    A program compiled for one device cannot have collectives, so ``assert_no_collectives`` refuses
    it rather than pass: run the tests with ``--shard-lint-devices 8`` (or ``shard_lint_devices``
    in the pytest configuration). Failures point at the test's line."""
    from . import testing

    return types.SimpleNamespace(
        analyze=testing.analyze,
        assert_no_collectives=testing.assert_no_collectives,
        assert_peak_below=testing.assert_peak_below,
    )
