"""The terminal view of ``fit``: the probes, the fitted line and the answer."""

from __future__ import annotations

import math
from functools import partial

from rich.console import Console
from rich.table import Table

from ..common.terminal_safe import shown, terminal_safe

MIB = 1024**2


def in_mib(n: float, budget: int) -> str:
    """A fit figure in MiB, every figure of the report in the one unit (probes from KiB to GiB read side by
    side: a peak just over a 1 GiB budget is 1,025.3 MiB, not "1.0 GiB"), with the decimals that tell figures
    near the budget apart from it (one from 100 MiB up, three for a 1 MiB budget); a slope under them keeps
    three significant digits rather than reading 0.0."""
    mib, digits = n / MIB, max(1, 3 - int(math.floor(math.log10(max(budget / MIB, 1e-3)))))
    return f"{mib:.3g} MiB" if 0 < abs(mib) < 10**-digits else f"{mib:,.{digits}f} MiB"


def fitted_line_text(result) -> str:
    """The line with the probes it was fitted to, and the probes below it that are off it."""
    mib = partial(in_mib, budget=result.budget_bytes)
    start = getattr(result, "line_from_value", None)
    fitted = sorted(p.value for p in result.probes if not p.refused_by_compiler
                    and (start is None or p.value >= start))
    below = sorted((p for p in result.probes if start is not None and p.value < start and not p.refused_by_compiler),
                   key=lambda p: p.value)
    over = (f"the {len(fitted)} probes {result.param}={fitted[0]}..{fitted[-1]}" if len(fitted) > 2
            else " and ".join(f"{result.param}={v}" for v in fitted))
    text = (f"fitted line (least squares over {over}): peak ~ {mib(result.line_intercept_bytes)} + "
            f"{mib(result.line_slope_bytes)} x {result.param}")
    if below:
        text += (f"; not linear below {result.param}={start}: "
                 + ", ".join(f"{result.param}={p.value} measured {mib(p.peak_bytes)}" for p in below))
    return text


def _near(n: int | None, budget: int, near: float = 0.05) -> bool:
    """A peak near the budget (within ``near``) is written with the budget beside it, once a line, so the two
    are compared at a glance."""
    return n is not None and abs(n - budget) <= near * budget


def _of_target(result, value: int | None, role: str) -> str:
    """Which target's peak a figure is, when the script has several (the one with the largest peak)."""
    if len(getattr(result, "targets", ())) < 2:
        return ""
    name = next((p.target for p in result.probes if p.value == value and p.target), None)
    return f" ({name}, {role})" if name else ""


def render_fit(result, console: Console) -> None:
    result = terminal_safe(result)
    mib = partial(in_mib, budget=result.budget_bytes)
    # The title on a line of its own, wrapped at the terminal's width: as the table's, it wrapped at the table's
    # (a 36-column table of short figures cut "Probes of rows (in the order compiled)" in two).
    console.print(shown(f"Probes of {result.param} (in the order compiled)", style="italic"))
    table = Table()
    several = len(result.targets) > 1
    columns = [("#", {"justify": "right"}), (result.param, {"justify": "right"}),
               ("peak / device", {"justify": "right"})]
    columns += [("largest of the targets", {})] if several else []
    for col, kw in (*columns, ("fits", {})):
        table.add_column(col, **kw)
    for i, p in enumerate(result.probes, 1):
        refused = " (the compiler refused it: out of memory)" if p.refused_by_compiler else ""
        which = [p.target or "-"] if several else []
        table.add_row(str(i), str(p.value), mib(p.peak_bytes), *which, ("yes" if p.fits else "no") + refused)
    console.print(table)
    if result.line_slope_bytes is not None:
        console.print(fitted_line_text(result))
    console.print(f"budget {mib(result.budget_bytes)} per device ({result.platform}), "
                  f"{result.param} a multiple of {result.multiple_of} in {result.range[0]}..{result.range[1]}")
    device = getattr(result, "budget_source", None)
    if device and result.platform.startswith("cpu") and not device.startswith("cpu"):
        # --device sets the budget, not the compile: XLA's CPU and accelerator backends fuse and
        # schedule differently, so the peaks measured here are not the device's.
        console.print(shown(f"note: these peaks are a CPU compile's, measured against the {device}'s memory; the "
                           f"{device}'s own differ: --platform {device.removesuffix('-nvl')} compiles for it",
                           style="yellow"))
    if result.value is None:
        first = result.probes[0]
        console.print(shown(f"no admissible {result.param} fits: the smallest already needs "
                           f"{mib(first.peak_bytes)}{_of_target(result, first.value, 'the largest')}",
                           style="bold red"))
        return
    budget = f" (budget {mib(result.budget_bytes)})"
    next_near = result.next_value is not None and _near(result.next_peak_bytes, result.budget_bytes)
    nxt = (f"; {result.param}={result.next_value} needs {mib(result.next_peak_bytes)}"
           f"{budget if next_near else ''}{_of_target(result, result.next_value, 'the target that binds')}"
           if result.next_value is not None else " (the top of the range)")
    near = not next_near and _near(result.peak_bytes, result.budget_bytes)
    peak = mib(result.peak_bytes) + (budget if near else "")
    largest = _of_target(result, result.value, "the largest")
    console.print(shown(f"{result.param} = {result.value}: peak {peak}{largest}{nxt}",
                       style="bold green"))
