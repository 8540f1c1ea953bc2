"""SL302 low-headroom: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.byte_sizes import format_bytes
from ..models.report import Severity
from ..models.rule_codes import SL302
from .context import RuleContext
from .peak_memory import peak_culprit, peak_detail
from .registry import Emitter, OptionKind, RuleOption, define_rule

HEADROOM_FRACTION = RuleOption(
    "headroom-fraction", 0.10, OptionKind.fraction,
    "headroom under this fraction of the budget is reported")


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
    fraction = ctx.option(HEADROOM_FRACTION)
    if free < fraction * mem.budget_bytes:
        top = peak_culprit(ctx)
        out.emit(
            f"per-device peak {format_bytes(mem.peak_bytes)} leaves {format_bytes(free)} "
            f"({100 * free / mem.budget_bytes:.1f}%) of the {format_bytes(mem.budget_bytes)} budget "
            f"({mem.platform} figures){peak_detail(ctx)}",
            top.source if top else ctx.entry_source, via=top.via if top else None,
            fix=f"keep at least {100 * fraction:.0f}% free: a smaller batch, or shard the buffers live at the peak",
            subject="peak",
        )


RULE = define_rule(SL302, Severity.warning, low_headroom,
                   options=(HEADROOM_FRACTION,))
