"""Assertions for your own test suite: compile a ``jax.stages.Lowered`` (on the
devices your tests already run on) and check its collectives and peak.

    from jax_shard_lint.analyzer.testing import assert_no_collectives, assert_peak_below

    def test_step_does_not_gather_weights():
        lowered = jax.jit(step).lower(params_spec, batch_spec)
        assert_no_collectives(lowered, kinds=("all-gather",), min_bytes=64 << 20)
        assert_peak_below(lowered, 40 << 30)

The same functions are the ``shard_lint`` pytest fixture's methods. Tests need
several devices for a sharded program: ``pytest --shard-lint-devices 8`` (or
``use_virtual_devices(8)`` in ``conftest.py`` before JAX starts) gives them 8
virtual CPU devices. A failure points at the test's line, not at these functions.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..passes.common.byte_sizes import format_bytes, parse_bytes
from ..passes.models.report import TargetReport
from ..reports.common.tensor_text import live_buffer_source, produced_by_text, shape_text


def use_virtual_devices(count: int) -> None:
    """Give JAX ``count`` virtual CPU devices; call it before JAX starts its backends (a
    ``conftest.py``, or ``pytest --shard-lint-devices N``). Too late is an error saying so."""
    from .adapter.native_stderr import quiet_native_stderr

    # The first import of JAX is where its CUDA plugin's C++ logger writes "Could not find cuda
    # drivers" (three times) on a machine without a GPU: not in the user's test output.
    with quiet_native_stderr():
        import jax

    from .adapter import jax_adapter

    if count < 1:
        raise ValueError(f"use_virtual_devices: expected at least 1 device, got {count}")
    if jax_adapter.backends_initialized():
        have = len(jax.devices("cpu"))
        if have != count:
            raise RuntimeError(f"JAX already started with {have} CPU device(s); ask for {count} before anything "
                               "uses JAX (pytest --shard-lint-devices, or conftest.py before the imports that use it)")
        return
    jax.config.update("jax_num_cpu_devices", count)


def analyze(lowered, name: str = "target", budget: int | str | None = None) -> TargetReport:
    """The lint report of one Lowered program, compiled as it is."""
    __tracebackhide__ = True  # pytest shows the test's line, not this one
    from ..passes.pipelines.lint import analyze_target
    from .adapter import jax_adapter
    from .backend.device_selection import platform_label
    from .backend.run_target import resolve_run_target
    from .backend.target_analysis import compiled_facts
    from .context.config import Settings

    settings, _ = resolve_run_target(Settings(budget_bytes=parse_bytes(budget) if budget is not None else None),
                                     selection="none")
    module = jax_adapter.stablehlo_module(lowered)
    facts = compiled_facts(lowered, platform_label(settings), settings)
    return analyze_target(name, module, facts, settings.pass_config)


def assert_no_collectives(
    lowered, kinds: Iterable[str] = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"),
    min_bytes: int | str = 0, axes: Iterable[str] | None = None,
) -> TargetReport:
    """Fail when the compiled program runs a collective of one of ``kinds`` (over
    any of ``axes``, when given) moving at least ``min_bytes`` per step. A program for
    one device fails too: it cannot have a collective, so the check would say nothing."""
    __tracebackhide__ = True
    report = analyze(lowered)
    if report.num_devices < 2:
        raise AssertionError(
            "the program is compiled for 1 device, where no collective can run: this check would pass whatever "
            "the shardings. Lower it on a mesh of several devices; for virtual CPU devices run pytest with "
            "--shard-lint-devices 8 (or call jax_shard_lint.analyzer.testing.use_virtual_devices(8) before JAX "
            "starts)")
    kinds, floor = set(kinds), parse_bytes(min_bytes)
    wanted_axes = set(axes) if axes is not None else None
    hits = [
        c for c in report.collectives
        if c.kind in kinds and c.bytes * c.count >= floor
        and (wanted_axes is None or wanted_axes & set(c.mesh_axes))
    ]
    if hits:
        lines = [f"  {c.kind} over {','.join(c.mesh_axes)}: {c.dtype}{c.shape}, {format_bytes(c.bytes * c.count)} "
                 f"per step at {c.source or 'unknown line'}" for c in hits]
        raise AssertionError(f"{len(hits)} unexpected collective(s):\n" + "\n".join(lines))
    return report


def assert_peak_below(lowered, nbytes: int | str) -> TargetReport:
    """Fail when the per-device peak (temp + argument + output - alias) reaches ``nbytes``."""
    __tracebackhide__ = True
    limit = parse_bytes(nbytes)
    report = analyze(lowered)
    peak = report.memory.peak_bytes if report.memory else None
    if peak is None:
        raise AssertionError("the backend reports no memory analysis for this program")
    if peak >= limit:
        top = report.memory.live_at_peak[:3]
        detail = "; ".join(f"{format_bytes(b.bytes)} {shape_text(b.dtype, b.shape) if b.shape is not None else '-'} "
                           f"from {live_buffer_source(b)} ({produced_by_text(b)})" for b in top)
        raise AssertionError(f"per-device peak {format_bytes(peak)} is not below {format_bytes(limit)} "
                             f"({report.platform}); largest live buffers: {detail}")
    return report
