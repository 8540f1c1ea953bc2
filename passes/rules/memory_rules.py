"""Rules over the per-device memory peak."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..models.report import Severity
from .context import RuleContext
from .registry import Emitter, RuleOption, rule


def _peak_culprit(ctx: RuleContext):
    buffers = ctx.memory.live_at_peak if ctx.memory else []
    top = next((b for b in buffers if b.source is not None), None)
    return top


def _peak_detail(ctx: RuleContext) -> str:
    top = _peak_culprit(ctx)
    if top is None:
        return ""
    what = f"{top.dtype}{top.shape}" if top.shape is not None else top.name
    return f"; the largest buffer live at the peak is {what} ({format_bytes(top.bytes)}) from {top.op_name or top.name}"


@rule("SL301", "peak-over-budget", Severity.error)
def peak_over_budget(ctx: RuleContext, out: Emitter) -> None:
    """The per-device memory peak exceeds the budget.

    What it does
    ------------
    Compares XLA's per-device peak (temp + argument + output - alias) with the
    budget given by `--budget`, `--device` or the configuration, and reports a
    peak above it.

    Why is this bad
    ---------------
    The step will fail with an out-of-memory error on the real devices, after
    the job has been scheduled, the data loaded and the model initialised.

    Example
    -------
    ```
    jax-shard-lint lint train.py --device h100 --set batch=512
    ```

    Fix
    ---
    Lower the batch (`jax-shard-lint fit` finds the largest that fits), shard
    the buffers listed as live at the peak over more devices, donate the state,
    or rematerialise activations with `jax.checkpoint`.
    """
    mem = ctx.memory
    if mem is None or mem.budget_bytes is None or mem.peak_bytes <= mem.budget_bytes:
        return
    top = _peak_culprit(ctx)
    out.emit(
        f"per-device peak {format_bytes(mem.peak_bytes)} exceeds the budget {format_bytes(mem.budget_bytes)} "
        f"by {format_bytes(mem.peak_bytes - mem.budget_bytes)} ({mem.platform} figures){_peak_detail(ctx)}",
        top.source if top else ctx.entry_source, via=top.via if top else None,
        fix="reduce the batch, shard the buffers live at the peak, donate the state, or wrap layers in "
        "jax.checkpoint",
        subject="peak",
    )


@rule(
    "SL302", "low-headroom", Severity.warning,
    options=(RuleOption("headroom-fraction", 0.10, "fraction",
                        "headroom under this fraction of the budget is reported"),),
)
def low_headroom(ctx: RuleContext, out: Emitter) -> None:
    """The per-device peak fits the budget with little room to spare.

    What it does
    ------------
    Reports a peak that fits the budget but leaves less than
    `headroom-fraction` (10% by default) of it free.

    Why is this bad
    ---------------
    Allocator fragmentation, the runtime's own buffers, a longer sequence in
    one batch or a different XLA version can push a tight step over the edge,
    and the figures from a CPU compile can differ from the GPU's.

    Example
    -------
    ```
    peak 75.2 GiB of an 80 GiB budget: 6% headroom
    ```

    Fix
    ---
    Leave a margin: a slightly smaller batch, or the changes listed for
    `peak-over-budget`.
    """
    mem = ctx.memory
    if mem is None or mem.budget_bytes is None or mem.peak_bytes > mem.budget_bytes or mem.budget_bytes == 0:
        return
    free = mem.budget_bytes - mem.peak_bytes
    fraction = ctx.options["headroom-fraction"]
    if free < fraction * mem.budget_bytes:
        top = _peak_culprit(ctx)
        out.emit(
            f"per-device peak {format_bytes(mem.peak_bytes)} leaves {format_bytes(free)} "
            f"({100 * free / mem.budget_bytes:.1f}%) of the {format_bytes(mem.budget_bytes)} budget "
            f"({mem.platform} figures){_peak_detail(ctx)}",
            top.source if top else ctx.entry_source, via=top.via if top else None,
            fix="keep at least 10% free: a smaller batch, or shard the buffers live at the peak",
            subject="peak",
        )
