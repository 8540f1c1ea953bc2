"""SL301 peak-over-budget: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..models.report import Severity
from ..models.rule_codes import SL301
from .context import RuleContext
from .peak_memory import peak_culprit, peak_detail
from .registry import Emitter, define_rule


def peak_over_budget(ctx: RuleContext, out: Emitter) -> None:
    """The per-device memory peak exceeds the budget.

    What it does
    ------------
    Compares XLA's per-device peak (temp + argument + output - alias) with the
    budget given by `--budget`, `--device` or the configuration, and reports a
    peak above it. A compiler that refuses the program for want of memory (XLA's
    TPU compiler: `RESOURCE_EXHAUSTED: Ran out of memory ...`) measured it: the
    refusal is reported here with the compiler's figures.

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
    if ctx.refusal is not None:
        r = ctx.refusal
        need, have = format_bytes(r.required_bytes), format_bytes(r.available_bytes)
        out.emit(
            f"the {ctx.platform.split(' (')[0]} compiler refused the program: {r.what} need {need}, over the "
            f"{have} it can use by {format_bytes(r.required_bytes - r.available_bytes)} "
            f"(the compiler's figures: \"{r.message}\")",
            ctx.entry_source,
            fix="reduce the batch (jax-shard-lint fit finds the largest that fits), shard parameters and optimizer "
            "state over more devices, donate the state, or wrap layers in jax.checkpoint",
            subject="peak",
        )
        return
    mem = ctx.memory
    if mem is None or mem.budget_bytes is None or mem.peak_bytes <= mem.budget_bytes:
        return
    top = peak_culprit(ctx)
    out.emit(
        f"per-device peak {format_bytes(mem.peak_bytes)} exceeds the budget {format_bytes(mem.budget_bytes)} "
        f"by {format_bytes(mem.peak_bytes - mem.budget_bytes)} ({mem.platform} figures){peak_detail(ctx)}",
        top.source if top else ctx.entry_source, via=top.via if top else None,
        fix="reduce the batch, shard the buffers live at the peak, donate the state, or wrap layers in "
        "jax.checkpoint",
        subject="peak",
    )


RULE = define_rule(SL301, Severity.error, peak_over_budget)
