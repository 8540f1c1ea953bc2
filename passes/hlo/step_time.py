"""An estimated step time from the compiled program alone.

Compute: a roofline per top-level operation (``hlo/cost.py``): the larger of its
matmul FLOPs over the device's peak for the operands' type and the bytes it
touches over HBM bandwidth, summed over the step. Communication: per collective,
the bytes the standard ring algorithm moves per device over the link it crosses,
plus a latency per ring step:

    all-gather          (n-1)/n x B        n-1 steps      (B: the per-device result)
    reduce-scatter      (n-1)   x B        n-1 steps
    all-reduce        2 (n-1)/n x B      2(n-1) steps
    all-to-all          (n-1)/n x B        n-1 steps
    collective-permute          B            1 step

A group that spans hosts runs at the slower across-host link. Async collectives
(``*-start``/``*-done``) may hide under compute: the overlapped bound is
max(compute, async communication) + synchronous communication; the serial sum
assumes no overlap. The truth lies between, nearer the overlapped bound when
XLA's scheduler has independent work to overlap with. A collective only a failing
runtime check runs (``error-path``: equinox's error_if) is timed but left out of
the step: a step that succeeds never runs it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..models.device_spec import DeviceSpec
from ..models.report import ERROR_PATH, Collective, StepTime
from .cost import ProgramCost
from .module import MAIN_THREAD

# (bytes moved per byte of result, latency steps) as functions of the group size n.
_RING: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
    "all-gather": (lambda n: (n - 1) / n, lambda n: n - 1),
    "reduce-scatter": (lambda n: n - 1, lambda n: n - 1),
    "all-reduce": (lambda n: 2 * (n - 1) / n, lambda n: 2 * (n - 1)),
    "all-to-all": (lambda n: (n - 1) / n, lambda n: n - 1),
    "ragged-all-to-all": (lambda n: (n - 1) / n, lambda n: n - 1),
    "collective-permute": (lambda n: 1.0, lambda n: 1),
    "collective-broadcast": (lambda n: 1.0, lambda n: 1),
}


def collective_seconds(kind: str, result_bytes: int, group_size: int, cross_host: bool | None,
                       spec: DeviceSpec) -> float:
    """One execution of a collective, by the ring formulas above."""
    if group_size <= 1 and kind != "collective-permute":
        return 0.0
    moved, steps = _RING.get(kind, _RING["collective-permute"])
    n = max(group_size, 2)
    bandwidth = spec.link_across_hosts if cross_host else spec.link_within_host
    latency = spec.latency_across_hosts if cross_host else spec.latency_within_host
    return float(moved(n) * result_bytes / bandwidth + steps(n) * latency)


def significant(x: float) -> float:
    """Six significant digits: the JSON stays stable across float summation orders."""
    return float(f"{x:.6g}")


def estimate_step_time(
    cost: ProgramCost, collectives: tuple[Collective, ...] | list[Collective], spec: DeviceSpec,
    xla: dict[str, float] | None = None,
) -> tuple[StepTime, list[Collective]]:
    """The target's estimate, and its collectives with their time per step, the
    slowest first."""
    compute = flop_time = memory_time = offloaded = 0.0
    for op in cost.ops:
        memory_s = op.bytes / spec.hbm_bytes_per_s
        if op.thread != MAIN_THREAD:
            # Another engine's work (a TPU's SparseCores gathering an embedding): it moves its bytes
            # beside the TensorCore's compute, which it overlaps; no published peak beyond HBM's.
            offloaded += memory_s * op.runs
            continue
        flop_s = sum(f / spec.peak(dtype) for dtype, f in op.flops_by_dtype)
        compute += max(flop_s, memory_s) * op.runs
        flop_time += flop_s * op.runs
        memory_time += memory_s * op.runs
    timed: list[Collective] = []
    sync = asynchronous = within = across = 0.0
    failing_only = 0
    for c in collectives:
        seconds = collective_seconds(c.kind, c.bytes, c.group_size, c.cross_host, spec) * c.count
        timed.append(c.model_copy(update={"seconds": significant(seconds)}))
        if c.intent == ERROR_PATH:  # a step that succeeds never runs it (error_paths.py)
            failing_only += 1
            continue
        if c.is_async:
            asynchronous += seconds
        else:
            sync += seconds
        if c.cross_host:
            across += seconds
        else:
            within += seconds
    timed.sort(key=lambda c: (-(c.seconds or 0.0), -c.bytes * c.count, c.kind, c.hlo_name))
    xla = xla or {}
    communication = sync + asynchronous
    basis = (f"roofline per operation of the compiled program ({len(cost.ops)} ops) and ring collectives, "
             f"with {spec.description} peaks")
    notes = []
    if spec.nominal:
        notes.append("nominal CPU figures: compare targets with each other, do not read the seconds as a prediction")
    if offloaded:
        elsewhere = [op for op in cost.ops if op.thread != MAIN_THREAD]
        notes.append(f"work on the {', '.join(sorted({op.thread for op in elsewhere}))} thread ({len(elsewhere)} "
                     "ops) counted by its bytes over HBM bandwidth, overlapped with compute")
    if cost.counted_once:
        notes.append(f"{cost.counted_once} operations in loops whose trip count XLA does not know counted once each: "
                     "a lower bound (--loop-trips N counts them N times)")
    if failing_only:
        notes.append(f"{failing_only} collective(s) only a failing runtime check runs (intent error-path) left out")
    if cost.unknown_custom_calls:
        notes.append("custom calls without known FLOPs counted by their bytes only: "
                     + ", ".join(cost.unknown_custom_calls))
    estimate = StepTime(
        device=spec.name, device_description=spec.description, nominal=spec.nominal, basis=basis,
        seconds=significant(max(compute, asynchronous, offloaded) + sync),
        serial_seconds=significant(compute + offloaded + communication), offloaded_seconds=significant(offloaded),
        compute_seconds=significant(compute), flop_seconds=significant(flop_time),
        memory_seconds=significant(memory_time),
        communication_seconds=significant(communication), async_communication_seconds=significant(asynchronous),
        within_host_seconds=significant(within), across_hosts_seconds=significant(across),
        flops=significant(cost.flops), bytes_accessed=significant(cost.bytes), compute_counted_once=cost.counted_once,
        xla_flops=xla.get("flops"), xla_bytes_accessed=xla.get("bytes_accessed"),
        xla_optimal_seconds=xla.get("optimal_seconds"), sources=list(spec.sources), notes=notes,
    )
    return estimate, timed
