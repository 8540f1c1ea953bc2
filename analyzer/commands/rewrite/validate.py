"""Run the original and the rewritten executable on the devices at hand (GPUs
when JAX sees them, else the virtual CPU devices) on the same seeded inputs,
and check that they agree, that the outputs come out on the declared shardings,
and how long each takes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from ....passes.common.byte_sizes import format_bytes
from ....passes.models.entry import EntrySignature
from ....passes.models.rewrite import Validation
from ...adapter import jax_adapter
from ...context.config import Settings

# Relative and absolute tolerance per element type; integers and booleans must match exactly.
TOLERANCE = {"f64": (1e-9, 1e-9), "f32": (1e-4, 1e-5), "f16": (1e-2, 1e-3), "bf16": (2e-2, 1e-2)}
HOST_MEMORY_FRACTION = 0.8
WARMUP = 2


def _available_host_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _too_big(peak: int, n_devices: int) -> str | None:
    import jax

    stats = jax.devices()[0].memory_stats()
    if stats and stats.get("bytes_limit"):
        if peak > stats["bytes_limit"]:
            return (f"the predicted peak {format_bytes(peak)} exceeds the device's "
                    f"{format_bytes(stats['bytes_limit'])}")
        return None
    available = _available_host_bytes()
    if available is not None and peak * n_devices > HOST_MEMORY_FRACTION * available:
        return (f"{n_devices} virtual devices at the predicted peak {format_bytes(peak)} need "
                f"{format_bytes(peak * n_devices)}, more than {int(HOST_MEMORY_FRACTION * 100)}% of the "
                f"{format_bytes(available)} of host memory available")
    return None


def seeded_inputs(sig: EntrySignature, seed: int = 0) -> list[np.ndarray]:
    """Random arrays with the arguments' shapes and dtypes. Integers are drawn
    from [0, 4): valid indices for any axis of at least 4 and small loop bounds;
    booleans are fair coins; floats are standard normal."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    out = []
    for t in sig.inputs:
        dtype = _np_dtype(t.dtype)
        if t.dtype == "pred":
            out.append(rng.random(t.shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            out.append(rng.integers(0, 4, size=t.shape).astype(dtype))
        else:
            out.append(np.asarray(rng.standard_normal(t.shape), dtype=jnp.float32).astype(dtype))
    return out


def _np_dtype(hlo: str):
    import jax.numpy as jnp

    return {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
            "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
            "bf16": jnp.bfloat16, "f32": np.float32, "f64": np.float64}.get(hlo, np.float32)


def _compare(a: np.ndarray, b: np.ndarray, dtype: str) -> tuple[str | None, str | None]:
    """(what differs or None, the NaN and Inf values both versions have at the same positions, in words).

    Seeded inputs can make any program produce NaN or Inf (an Adam step's second moment
    from standard-normal values is negative, and its sqrt NaN): NaN or Inf in both
    versions at the same positions agrees, and is counted so the report says so rather
    than a bare match (NaN == NaN would hide that nothing was compared there); NaN in
    one version only, or an Inf of another sign, never passes."""
    if a.shape != b.shape:
        return f"shapes differ: {a.shape} vs {b.shape}", None
    if dtype not in TOLERANCE:
        return (None if np.array_equal(a, b) else "values differ"), None
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if (nan_a != nan_b).any():
        return f"NaN in one version only, at {int((nan_a != nan_b).sum()):,} positions", None
    rtol, atol = TOLERANCE[dtype]
    ok = np.isclose(a64, b64, rtol=rtol, atol=atol) | nan_a  # isclose: an Inf matches only the same Inf
    n_nan, n_inf = int(nan_a.sum()), int((np.isinf(a64) & ok).sum())
    said = " and ".join(f"{n:,} {what}" for n, what in ((n_nan, "NaN"), (n_inf, "Inf")) if n)
    both = f"{said} of {a.size:,} values in both versions" if said else None
    return (None if ok.all() else f"values differ beyond the {dtype} tolerance"), both


def _timed(program, place, shapes, repeats: int, first=None) -> tuple[list, float]:
    """Median wall time of one step; arguments are placed afresh before each run
    (a step that donates its state consumes them) and outside the timed region.
    ``first`` is told how long the first run took."""
    import jax

    outs = None
    times = []
    for i in range(WARMUP + repeats):
        args = place()
        jax.block_until_ready(args)
        t0 = time.perf_counter()
        outs = jax_adapter.execute(program, args, shapes)
        for o in outs:
            o.block_until_ready()
        if i == 0 and first is not None:
            first(time.perf_counter() - t0)
        if i >= WARMUP:
            times.append(time.perf_counter() - t0)
    return outs, statistics.median(times)


def _peak_in_use() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def validate(before, after, sig: EntrySignature, expected: dict, settings: Settings, repeats: int,
             peak_before: int, peak_after: int, host: list | None = None,
             say: Callable[[str], None] | None = None) -> Validation:
    """``host``: the script's own inputs (``shard_lint_inputs``), flat; else seeded ones. ``say``
    hears how long the runs will take, from the first step's time, before they take it."""
    import jax

    backend = jax.devices()[0].platform
    n = sig.num_partitions
    reason = _too_big(max(peak_before, peak_after), n)
    if reason:
        return Validation(ran=False, backend=backend, reason=reason)
    given = host is not None
    host = host if given else seeded_inputs(sig)
    shapes = [tuple(o.shape) for o in sig.outputs]
    in_before = jax_adapter.parameter_shardings(before, len(sig.inputs))
    in_after = jax_adapter.parameter_shardings(after, len(sig.inputs))
    runs = WARMUP + repeats

    def estimate(first: float) -> None:
        if say:  # the first run carries one-time costs, so this is an upper estimate
            say(f"one step took {first:.2f} s; {2 * runs - 1} more runs of the two versions take up to about "
                f"{first * (2 * runs - 1):.0f} s")

    if say:
        say(f"running both versions on {n} {backend} devices, {WARMUP} warm-up + {repeats} timed steps each")
    outs_before, t_before = _timed(
        before, lambda: [jax.device_put(x, s) for x, s in zip(host, in_before)], shapes, repeats, estimate)
    measured_before = _peak_in_use()
    outs_after, t_after = _timed(
        after, lambda: [jax.device_put(x, s) for x, s in zip(host, in_after)], shapes, repeats)
    measured_after = _peak_in_use()
    mismatches, nans = [], []
    for o, a, b in zip(sig.outputs, outs_before, outs_after):
        problem, both = _compare(np.asarray(a), np.asarray(b), o.dtype)
        if problem:
            mismatches.append(f"{o.path}: {problem}")
        if both:
            nans.append(f"{o.path}: {both}")
    shardings_ok = True
    for index, want in expected.items():
        got = jax_adapter.sharding_axes(
            jax_adapter.named_sharding(after, index), len(sig.outputs[index].shape)) if after.output_shardings else None
        from ....passes.common.sharding_text import normalized

        if got is None or normalized(got, len(sig.outputs[index].shape)) != want:
            shardings_ok = False
            mismatches.append(
                f"{sig.outputs[index].path}: comes out as {got}, not the declared {list(map(list, want))}")
    return Validation(
        ran=True, backend=backend, outputs_match=not any(": comes out as" not in m for m in mismatches),
        nan_values=nans, outputs_not_finite=len(nans),
        shardings_match=shardings_ok, time_before_s=round(t_before, 6), time_after_s=round(t_after, 6),
        measured_peak_before_bytes=measured_before, measured_peak_after_bytes=measured_after,
        repeats=repeats, mismatches=mismatches, inputs="shard_lint_inputs" if given else "seeded",
    )
