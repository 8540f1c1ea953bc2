"""The terminal view of ``fit``: the probes, the fitted line and the answer."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ...passes.common.byte_sizes import format_bytes, format_bytes_against
from ..common.terminal_safe import shown, terminal_safe


def fitted_line_text(result) -> str:
    """The line with the probes it was fitted to, and the probes below it that are off it."""
    start = getattr(result, "line_from_value", None)
    fitted = sorted(p.value for p in result.probes if not p.refused_by_compiler
                    and (start is None or p.value >= start))
    below = sorted((p for p in result.probes if start is not None and p.value < start and not p.refused_by_compiler),
                   key=lambda p: p.value)
    over = (f"the {len(fitted)} probes {result.param}={fitted[0]}..{fitted[-1]}" if len(fitted) > 2
            else " and ".join(f"{result.param}={v}" for v in fitted))
    text = (f"fitted line (least squares over {over}): peak ~ {format_bytes(int(result.line_intercept_bytes))} + "
            f"{format_bytes(int(result.line_slope_bytes))} x {result.param}")
    if below:
        text += (f"; not linear below {result.param}={start}: "
                 + ", ".join(f"{result.param}={p.value} measured {format_bytes(p.peak_bytes)}" for p in below))
    return text


def _against_budget(n: int | None, budget: int) -> str:
    """A peak near the budget with the budget in the same unit, so the two can be compared at a glance."""
    text = format_bytes_against(n, budget)
    if text == format_bytes(n):
        return text
    return f"{text} (budget {format_bytes_against(budget, budget)})"


def render_fit(result, console: Console) -> None:
    result = terminal_safe(result)
    table = Table(title=f"Probes of {result.param} (in the order compiled)", title_justify="left")
    for col, kw in (("#", {"justify": "right"}), (result.param, {"justify": "right"}),
                    ("peak / device", {"justify": "right"}), ("fits", {})):
        table.add_column(col, **kw)
    for i, p in enumerate(result.probes, 1):
        refused = " (the compiler refused it: out of memory)" if p.refused_by_compiler else ""
        peak = format_bytes_against(p.peak_bytes, result.budget_bytes)
        table.add_row(str(i), str(p.value), peak, ("yes" if p.fits else "no") + refused)
    console.print(table)
    if result.line_slope_bytes is not None:
        console.print(fitted_line_text(result))
    console.print(f"budget {format_bytes(result.budget_bytes)} per device ({result.platform}), "
                  f"{result.param} a multiple of {result.multiple_of} in {result.range[0]}..{result.range[1]}")
    device = getattr(result, "budget_source", None)
    if device and result.platform.startswith("cpu") and not device.startswith("cpu"):
        # --device sets the budget, not the compile: XLA's CPU and accelerator backends fuse and
        # schedule differently, so the peaks measured here are not the device's.
        console.print(shown(f"note: these peaks are a CPU compile's, measured against the {device}'s memory; the "
                           f"{device}'s own differ: --platform {device.removesuffix('-nvl')} compiles for it",
                           style="yellow"))
    if result.value is None:
        console.print(shown(f"no admissible {result.param} fits: the smallest already needs "
                           f"{format_bytes(result.probes[0].peak_bytes)}", style="bold red"))
        return
    nxt = (f"; {result.param}={result.next_value} needs "
           f"{_against_budget(result.next_peak_bytes, result.budget_bytes)}"
           if result.next_value is not None else " (the top of the range)")
    peak = _against_budget(result.peak_bytes, result.budget_bytes)
    console.print(shown(f"{result.param} = {result.value}: peak {peak}{nxt}",
                       style="bold green"))
